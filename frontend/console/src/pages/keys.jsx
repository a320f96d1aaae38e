// API keys: the tenant's own keys (GET/POST /v1/keys, POST /v1/keys/{id}/revoke):
// listed by name and prefix (never the key), created (the key shown once), revoked.
// In open development mode the first key ends open mode: the page says so before,
// and asks to sign in with the new key after.

import "./admin.css";
import { useState } from "preact/hooks";
import { api } from "../api.js";
import { Ago, ConfirmButton, Empty, Failure, useAction, useLoad } from "../ui.jsx";
import { OnceSecret, ProblemNote } from "./webhooks.jsx";

export function Keys() {
  const list = useLoad(() => api.get("/v1/keys"), []);
  const [created, setCreated] = useState(null);
  // Open mode has ended (the first key) or this tab's key was revoked: until signed
  // in again nothing is asked of the API (it would answer 401).
  const [signedOut, setSignedOut] = useState(null);
  const keys = list.data?.keys || [];
  const endsOpenMode = Boolean(list.data?.open_mode && list.data?.first_key_ends_open_mode);

  async function create(name) {
    const made = await api.post("/v1/keys", { name });
    setCreated(made);
    // Later, once the confirmation has closed (the form goes with this).
    if (made.ended_open_mode) setTimeout(() => setSignedOut("ended"));
    else list.reload();
  }

  return (
    <section class="admin keys">
      <div class="title"><h1>API keys</h1></div>
      <p class="muted intro">
        The keys of this tenant. A key is shown once, when it is made; the list shows its
        first characters only. Revoking one stops it at once, everywhere.
      </p>
      {created && (
        <OnceSecret label={`API key ${created.name || created.prefix}`} value={created.key}>
          Shown only this once: copy it now and keep it safe. It cannot be shown again;
          anyone who has it acts as this tenant.
        </OnceSecret>
      )}
      {signedOut ? (
        <SignInAgain reason={signedOut} suggested={created?.ended_open_mode ? created.key : null} />
      ) : (
        <>
          {list.data?.open_mode && (
            <p class="card open-mode" role="note">
              Open development mode: requests without a key are served, as tenant <code>default</code>.
              {list.data.first_key_ends_open_mode
                ? " Creating the first key ends it for good: every request will need a key."
                : " It stays on (TASKSERVICE_AUTH_MODE=open) when keys exist."}
            </p>
          )}
          <CreateKey endsOpenMode={endsOpenMode} onCreate={create} />
          <Failure error={list.error} />
          {keys.length > 0 && (
            <div class="table-scroll">
              <table id="keys" class="admin-table">
                <thead>
                  <tr><th>name</th><th>prefix</th><th>created</th><th>revoked</th><th /></tr>
                </thead>
                <tbody>
                  {keys.map((key) => (
                    <tr data-key={key.id} class={key.revoked_at ? "revoked" : ""} key={key.id}>
                      <td class="name">
                        {key.name || <span class="muted">unnamed</span>}
                        {key.current && <span class="current"> · signed in with it</span>}
                      </td>
                      <td class="mono prefix">{key.prefix}…</td>
                      <td><Ago iso={key.created_at} /></td>
                      <td class="revoked-at">{key.revoked_at ? <Ago iso={key.revoked_at} /> : <span class="muted">no</span>}</td>
                      <td>
                        {!key.revoked_at && (
                          <ConfirmButton label="Revoke" danger title={`Revoke ${key.name || key.prefix}?`}
                            detail={key.current
                              ? "This is the key this page is signed in with: it stops working at once, and you will need another key to go on."
                              : "It stops working at once, on every server: whatever uses it gets 401 from now on. A revoked key cannot be restored."}
                            onConfirm={async () => {
                              const revoked = await api.post(`/v1/keys/${key.id}/revoke`);
                              if (revoked.current) {
                                api.signOut();
                                setTimeout(() => setSignedOut("revoked"));
                              } else {
                                list.reload();
                              }
                            }} />
                        )}
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
          {!list.loading && !list.error && keys.length === 0 && <Empty>No key yet.</Empty>}
        </>
      )}
    </section>
  );
}

function CreateKey({ endsOpenMode, onCreate }) {
  const [name, setName] = useState("");
  const { busy, error, setError, run } = useAction();
  const wanted = () => {
    if (!name.trim()) throw new Error("Name the key (what it is for), to recognise it later.");
    return name.trim();
  };
  async function submit(event) {
    event.preventDefault();
    setError(null);
    await run(async () => {
      await onCreate(wanted());
      setName("");
    });
  }
  return (
    <form class="admin-form inline card create-key" onSubmit={submit} noValidate>
      <label>
        name of a new key
        <input name="name" value={name} placeholder="ci, billing-service…" maxLength={200} autocomplete="off"
          onInput={(event) => setName(event.currentTarget.value)} />
      </label>
      {endsOpenMode ? (
        <ConfirmButton label="Create key" class="primary" dismiss="Not now" title="Create the first key and end open mode?"
          detail="This is the first API key: open development mode ends for good when it is made. Requests without a key (this page's too) are refused from then on, on every server of this database; revoking every key does not bring open mode back. The key is shown once: you will sign in with it."
          confirm="Create and end open mode"
          onConfirm={async () => {
            await onCreate(wanted());
            setName("");
          }} />
      ) : (
        <button type="submit" class="primary" disabled={busy}>Create key</button>
      )}
      <ProblemNote error={error} />
    </form>
  );
}

function SignInAgain({ reason, suggested }) {
  const [key, setKey] = useState("");
  return (
    <div class="card narrow signin-again" role="alert">
      <h2>Sign in</h2>
      <p>
        {reason === "ended"
          ? "Open development mode has ended: every request needs a key now. Copy the key above, then sign in with it."
          : "You revoked the key this page was signed in with. Sign in with another key to go on."}
      </p>
      <form class="signin-now" onSubmit={(event) => {
        event.preventDefault();
        api.signIn(key);
        location.reload();
      }}>
        <input name="key" type="password" placeholder="tsk_…" required value={key} aria-label="API key"
          autocomplete="off" onInput={(event) => setKey(event.currentTarget.value)} />
        <button type="submit" class="primary">Sign in</button>
        {suggested && (
          <button type="button" onClick={() => { api.signIn(suggested); location.reload(); }}>
            Sign in with the new key
          </button>
        )}
      </form>
    </div>
  );
}
