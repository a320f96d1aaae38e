// The taskservice console: a client of the public API like any other (api.js), in
// pages chosen by the URL's hash (router.js). Built into the Python package by
// `npm run console` (build.mjs); served at /ui/ with a Content-Security-Policy that
// allows nothing but the service's own files and origin.

import "./style.css";
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { api, onSignInNeeded } from "./api.js";
import { href, navigate, useRoute } from "./router.js";
import { PAGES } from "./pages/index.js";
import { SignIn } from "./pages/signin.jsx";

// The navigation: each page that has an entry, in order.
const NAV = PAGES.filter((page) => page.nav);

function Jump() {
  const [value, setValue] = useState("");
  return (
    <form
      class="jump"
      role="search"
      onSubmit={(event) => {
        event.preventDefault();
        const id = value.trim();
        if (id) navigate(href(["runs", id]));
        setValue("");
      }}
    >
      <input
        name="id"
        value={value}
        onInput={(event) => setValue(event.currentTarget.value)}
        placeholder="Go to a task id"
        aria-label="Go to a task id"
        autocomplete="off"
        spellcheck={false}
      />
    </form>
  );
}

function Shell() {
  const route = useRoute();
  const [signIn, setSignIn] = useState(false);
  const [menu, setMenu] = useState(false);
  useEffect(() => onSignInNeeded(() => setSignIn(true)), []);
  useEffect(() => setMenu(false), [route]);
  const [first = "runs"] = route.parts;
  const page = PAGES.find((candidate) => candidate.path === first) || PAGES[0];
  const View = page.view;
  return (
    <>
      <header class="top">
        <a class="brand" href="#/runs">taskservice</a>
        <button type="button" class="menu" aria-expanded={menu} aria-controls="nav" onClick={() => setMenu(!menu)}>
          Menu
        </button>
        <nav id="nav" class={menu ? "open" : ""}>
          {NAV.map((entry) => (
            <a href={`#/${entry.path}`} class={entry === page ? "active" : ""} aria-current={entry === page ? "page" : undefined}>
              {entry.nav}
            </a>
          ))}
        </nav>
        <Jump />
        {api.key() && (
          <button type="button" class="link sign-out" onClick={() => { api.signOut(); location.reload(); }}>
            Sign out
          </button>
        )}
      </header>
      <main id="view">
        {signIn ? <SignIn done={() => setSignIn(false)} /> : <View route={route} />}
      </main>
    </>
  );
}

render(<Shell />, document.getElementById("app"));
