import { useState } from "preact/hooks";
import { api } from "../api.js";

export function SignIn({ done }) {
  const [key, setKey] = useState("");
  return (
    <section class="card narrow signin">
      <h1>Sign in</h1>
      <p class="muted">
        Paste an API key (<code>taskservice keys create --tenant NAME</code>). It is kept in this
        tab's session storage only, and never put in a URL.
      </p>
      <form
        onSubmit={(event) => {
          event.preventDefault();
          api.signIn(key);
          done();
        }}
      >
        <input name="key" type="password" placeholder="tsk_…" required value={key}
          onInput={(event) => setKey(event.currentTarget.value)} aria-label="API key" />
        <button type="submit" class="primary">Sign in</button>
      </form>
    </section>
  );
}
