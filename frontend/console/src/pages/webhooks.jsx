// Webhooks: the tenant's webhooks (called for every task that reaches one of their
// states and matches their filters), created, edited, enabled or disabled, their
// secret rotated, deleted; one webhook's page shows its delivery log, each delivery
// with its attempts, and sends one again. A secret is shown once, when it is made.

import "./admin.css";
import { useEffect, useRef, useState } from "preact/hooks";
import { api, query } from "../api.js";
import { href, navigate } from "../router.js";
import { Ago, ConfirmButton, Content, Empty, Failure, STATES, dateTime, span, useAction, useLoad, shortId } from "../ui.jsx";

const DEFAULT_STATES = ["input_required", "completed", "failed", "cancelled"];
const POLL_MS = 2000;

export function Webhooks({ route }) {
  if (route.parts[1]) return <Webhook id={route.parts[1]} />;
  return <WebhookList />;
}

// -- shared with keys.jsx ------------------------------------------------------------

// A secret shown this once: the value, a copy button, and a warning.
export function OnceSecret({ label, value, children }) {
  const field = useRef(null);
  const [copied, setCopied] = useState("");
  async function copy() {
    try {
      await navigator.clipboard.writeText(value);
      setCopied("Copied");
    } catch {
      field.current.select(); // no clipboard (permission): selected, for Ctrl+C
      setCopied("Selected: press Ctrl+C");
    }
  }
  return (
    <div class="once-secret card" role="status">
      <strong>{label}</strong>
      <div class="secret-row">
        <input ref={field} class="mono secret" readOnly value={value} aria-label={label}
          onFocus={(event) => event.currentTarget.select()} />
        <button type="button" class="copy" onClick={copy}>Copy</button>
        {copied && <span class="muted copied">{copied}</span>}
      </div>
      <p class="warning">{children || "Shown only this once: copy it now and keep it safe. It cannot be shown again."}</p>
    </div>
  );
}

// A failed request's problem, next to the form that sent it: its detail, and each
// field's complaint when the API named them (422).
export function ProblemNote({ error }) {
  if (!error) return null;
  const fields = error.problem?.errors || [];
  return (
    <div class="problem error" role="alert">
      <p>{error.problem?.title && error.problem.title !== error.message ? `${error.problem.title}: ` : ""}{error.message}</p>
      {fields.length > 1 && (
        <ul>{fields.map((one) => <li>{(one.loc || []).filter((part) => part !== "body").join(".")}: {one.msg}</li>)}</ul>
      )}
    </div>
  );
}

// -- the list ------------------------------------------------------------------------

function WebhookList() {
  const list = useLoad(() => api.get(`/v1/webhooks${query({ limit: 200 })}`), []);
  const [created, setCreated] = useState(null);
  const [adding, setAdding] = useState(false);
  const [more, setMore] = useState({ items: [], cursor: undefined }); // pages past the first
  const first = list.data?.webhooks || [];
  const webhooks = [...first, ...more.items.filter((one) => !first.some((hook) => hook.id === one.id))];
  const cursor = more.cursor === undefined ? list.data?.next_cursor : more.cursor;
  const [olderError, setOlderError] = useState(null);
  async function older() {
    try {
      const page = await api.get(`/v1/webhooks${query({ limit: 200, cursor })}`);
      setMore({ items: [...more.items, ...page.webhooks], cursor: page.next_cursor });
    } catch (failure) {
      setOlderError(failure);
    }
  }
  return (
    <section class="admin webhooks">
      <div class="title">
        <h1>Webhooks</h1>
        <button type="button" class="primary" onClick={() => setAdding(!adding)} aria-expanded={adding}>
          {adding ? "Close" : "New webhook"}
        </button>
      </div>
      <p class="muted intro">
        Called with a signed POST for every task of this tenant that reaches one of a
        webhook's states and matches its filters. A task's own webhooks are on its page.
      </p>
      {created && (
        <OnceSecret label={`Signing secret of ${created.url}`} value={created.secret}>
          Shown only this once: copy it now and keep it with the receiver, which checks
          each call's signature with it. It cannot be shown again (rotate it for a new one).
        </OnceSecret>
      )}
      {adding && (
        <div class="card">
          <h2>New webhook</h2>
          <WebhookForm
            submitLabel="Create webhook"
            onSubmit={async (body) => {
              const made = await api.post("/v1/webhooks", body);
              setCreated(made);
              setAdding(false);
              setMore({ items: [], cursor: undefined });
              list.reload();
            }}
          />
        </div>
      )}
      <Failure error={list.error || olderError} />
      {webhooks.length > 0 && (
        <div class="table-scroll">
          <table id="webhooks" class="admin-table">
            <thead>
              <tr><th>URL</th><th>states</th><th>filters</th><th>enabled</th><th>created</th></tr>
            </thead>
            <tbody>
              {webhooks.map((hook) => (
                <tr data-webhook={hook.id} key={hook.id}>
                  <td class="url"><a href={href(["webhooks", hook.id])}>{hook.url}</a></td>
                  <td><States states={hook.states} /></td>
                  <td><Filters filters={hook.filters} /></td>
                  <td><Enabled hook={hook} /></td>
                  <td><Ago iso={hook.created_at} /></td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {cursor && <button type="button" class="older" onClick={older}>Older</button>}
      {!list.loading && !list.error && webhooks.length === 0 && (
        <Empty>No tenant-wide webhook yet.</Empty>
      )}
    </section>
  );
}

function States({ states }) {
  return (
    <span class="tags">
      {states.map((state) => <span class="tag" data-state={state}>{state.replace("_", " ")}</span>)}
    </span>
  );
}

function Filters({ filters }) {
  const parts = [];
  if (filters.agents?.length) parts.push(`agents: ${filters.agents.join(", ")}`);
  if (filters.context_id) parts.push(`context: ${filters.context_id}`);
  if (filters.metadata && Object.keys(filters.metadata).length) parts.push(`metadata: ${JSON.stringify(filters.metadata)}`);
  if (!parts.length) return <span class="muted">every task</span>;
  return <span class="filters-text">{parts.map((part) => <span class="filter">{part}</span>)}</span>;
}

function Enabled({ hook }) {
  if (hook.enabled) {
    return (
      <span class="enabled yes">
        enabled{hook.consecutive_failures > 0 ? ` · ${hook.consecutive_failures} failing` : ""}
      </span>
    );
  }
  return <span class="enabled no" title={hook.disabled_reason || ""}>disabled{hook.disabled_reason ? `: ${hook.disabled_reason}` : ""}</span>;
}

// -- the form (create and edit) ------------------------------------------------------

function WebhookForm({ initial, submitLabel, onSubmit, onCancel }) {
  const agents = useLoad(() => api.get("/v1/agents"), []);
  const [url, setUrl] = useState(initial?.url || "");
  const [states, setStates] = useState(new Set(initial?.states || DEFAULT_STATES));
  const filters = initial?.filters || {};
  const [chosenAgents, setChosenAgents] = useState(new Set(filters.agents || []));
  const [contextId, setContextId] = useState(filters.context_id || "");
  const [metadata, setMetadata] = useState(filters.metadata ? JSON.stringify(filters.metadata, null, 2) : "");
  const { busy, error, setError, run } = useAction();
  const ownTask = Boolean(initial?.task_id);
  const known = (agents.data?.agents || []).map((agent) => agent.name);
  const agentNames = [...new Set([...known, ...chosenAgents])];

  function toggle(set, setter, value, on) {
    const next = new Set(set);
    if (on) next.add(value);
    else next.delete(value);
    setter(next);
  }

  async function submit(event) {
    event.preventDefault();
    setError(null);
    const body = { url: url.trim(), states: STATES.filter((state) => states.has(state)) };
    const wanted = {};
    if (chosenAgents.size) wanted.agents = [...chosenAgents];
    if (contextId.trim()) wanted.context_id = contextId.trim();
    if (metadata.trim()) {
      try {
        wanted.metadata = JSON.parse(metadata);
      } catch (failure) {
        setError(new Error(`metadata: not JSON (${failure.message})`));
        return;
      }
    }
    // A new webhook without filters has none; an edited one is told it has none now.
    // (A task's own webhook has none at all.)
    if (!ownTask && (Object.keys(wanted).length || initial)) body.filters = wanted;
    await run(() => onSubmit(body));
  }

  return (
    <form class="webhook-form admin-form" onSubmit={submit} noValidate>
      <label>
        URL
        <input name="url" type="url" value={url} required placeholder="https://alerts.example.com/hooks/taskservice"
          onInput={(event) => setUrl(event.currentTarget.value)} autocomplete="off" spellcheck={false} />
      </label>
      <fieldset class="choices">
        <legend>states</legend>
        {STATES.filter((state) => state !== "pending" || states.has(state)).map((state) => (
          <label class={`chip ${states.has(state) ? "on" : ""}`}>
            <input type="checkbox" name="states" value={state} checked={states.has(state)}
              onChange={(event) => toggle(states, setStates, state, event.currentTarget.checked)} />
            {state.replace("_", " ")}
          </label>
        ))}
      </fieldset>
      {ownTask ? (
        <p class="muted">A task's own webhook: it is called for that task only, so it has no filters.</p>
      ) : (
        <>
          <fieldset class="choices">
            <legend>only tasks of these agents (none chosen: every agent)</legend>
            {agentNames.map((name) => (
              <label class={`chip ${chosenAgents.has(name) ? "on" : ""}`}>
                <input type="checkbox" name="agents" value={name} checked={chosenAgents.has(name)}
                  onChange={(event) => toggle(chosenAgents, setChosenAgents, name, event.currentTarget.checked)} />
                {name}
              </label>
            ))}
          </fieldset>
          <label>
            only tasks in this context
            <input name="context_id" value={contextId} placeholder="any context"
              onInput={(event) => setContextId(event.currentTarget.value)} autocomplete="off" />
          </label>
          <label>
            only tasks whose metadata contains (JSON object)
            <textarea name="metadata" value={metadata} placeholder='{"team": "billing"}' spellcheck={false}
              onInput={(event) => setMetadata(event.currentTarget.value)} />
          </label>
        </>
      )}
      <ProblemNote error={error} />
      <div class="buttons">
        {onCancel && <button type="button" onClick={onCancel}>Cancel</button>}
        <button type="submit" class="primary" disabled={busy}>{submitLabel}</button>
      </div>
    </form>
  );
}

// -- one webhook ---------------------------------------------------------------------

function Webhook({ id }) {
  const hook = useLoad(() => api.get(`/v1/webhooks/${encodeURIComponent(id)}`), [id]);
  const [editing, setEditing] = useState(false);
  const [secret, setSecret] = useState(null);
  const [error, setError] = useState(null);
  const [deliveriesTick, setDeliveriesTick] = useState(0);
  if (hook.error) {
    return <Failure error={hook.error.status === 404 ? new Error(`No webhook ${id} (or not yours).`) : hook.error} />;
  }
  const found = hook.data;
  if (!found) return <p class="muted">Loading…</p>;

  async function setEnabled(enabled) {
    setError(null);
    try {
      await api.patch(`/v1/webhooks/${found.id}`, { enabled });
      hook.reload();
    } catch (failure) {
      setError(failure);
    }
  }

  return (
    <section class="admin webhook" data-webhook={found.id}>
      <p class="crumbs"><a href="#/webhooks">Webhooks</a> ›</p>
      <div class="title">
        <h1 class="url">{found.url}</h1>
        <Enabled hook={found} />
      </div>
      {secret && (
        <OnceSecret label="New signing secret" value={secret}>
          Shown only this once: copy it to the receiver now.
          {found.previous_secret_expires_at
            ? ` Until ${dateTime(found.previous_secret_expires_at)} each call is signed with the old secret too.`
            : ""}
        </OnceSecret>
      )}
      <div class="actions">
        <button type="button" onClick={() => setEditing(!editing)} aria-expanded={editing}>{editing ? "Close" : "Edit"}</button>
        {found.enabled ? (
          <ConfirmButton label="Disable" title="Disable this webhook?"
            detail="Nothing is sent to it while it is disabled: the tasks that would have been delivered meanwhile are not sent later."
            onConfirm={() => api.patch(`/v1/webhooks/${found.id}`, { enabled: false }).then(hook.reload)} />
        ) : (
          <button type="button" onClick={() => setEnabled(true)}>Enable</button>
        )}
        <ConfirmButton label="Rotate secret" title="Rotate the signing secret?"
          detail="A new secret is made and shown once. The old one keeps signing too for a while (the server's overlap), so the receiver can move to the new one."
          onConfirm={async () => {
            const rotated = await api.post(`/v1/webhooks/${found.id}/rotate-secret`, {});
            setSecret(rotated.secret);
            hook.reload();
          }} />
        <ConfirmButton label="Delete" danger title="Delete this webhook?"
          detail="It is deleted with its delivery log: every delivery and attempt listed below goes too. Nothing more is sent to it."
          onConfirm={async () => {
            await api.delete(`/v1/webhooks/${found.id}`);
            setTimeout(() => navigate("#/webhooks")); // once the dialog has closed
          }} />
      </div>
      <ProblemNote error={error} />
      {editing && (
        <div class="card">
          <h2>Edit</h2>
          <WebhookForm
            initial={found}
            submitLabel="Save"
            onCancel={() => setEditing(false)}
            onSubmit={async (body) => {
              await api.patch(`/v1/webhooks/${found.id}`, body);
              setEditing(false);
              hook.reload();
            }}
          />
        </div>
      )}
      <dl class="facts card">
        <dt>states</dt><dd><States states={found.states} /></dd>
        <dt>filters</dt><dd><Filters filters={found.filters} /></dd>
        {found.task_id && <><dt>task</dt><dd><a class="mono" href={href(["runs", found.task_id])}>{found.task_id}</a></dd></>}
        <dt>failures</dt>
        <dd>{found.consecutive_failures}{found.failing_since && <> since <Ago iso={found.failing_since} /></>}</dd>
        {found.disabled_at && <><dt>disabled</dt><dd><Ago iso={found.disabled_at} /></dd></>}
        {found.previous_secret_expires_at && (
          <><dt>old secret signs until</dt><dd>{dateTime(found.previous_secret_expires_at)}</dd></>
        )}
        <dt>created</dt><dd><Ago iso={found.created_at} /></dd>
        <dt>updated</dt><dd><Ago iso={found.updated_at} /></dd>
        <dt>id</dt><dd class="mono">{found.id}</dd>
      </dl>
      <Deliveries webhookId={found.id} enabled={found.enabled} tick={deliveriesTick} onChange={() => setDeliveriesTick((n) => n + 1)} />
    </section>
  );
}

// The delivery log, newest first, kept current while this page is open.
function Deliveries({ webhookId, enabled, tick, onChange }) {
  const [page, setPage] = useState(null);
  const [error, setError] = useState(null);
  useEffect(() => {
    let current = true;
    let timer = null;
    async function load() {
      try {
        const found = await api.get(`/v1/webhooks/${webhookId}/deliveries${query({ limit: 50 })}`);
        if (current) {
          setPage(found);
          setError(null);
        }
      } catch (failure) {
        if (current) setError(failure);
      }
      if (current) timer = setTimeout(load, POLL_MS);
    }
    load();
    return () => {
      current = false;
      clearTimeout(timer);
    };
  }, [webhookId, tick]);
  const [more, setMore] = useState({ items: [], cursor: undefined }); // past the first page
  useEffect(() => setMore({ items: [], cursor: undefined }), [webhookId]);
  const first = page?.deliveries || [];
  const deliveries = [...first, ...more.items.filter((one) => !first.some((shown) => shown.id === one.id))];
  const cursor = more.cursor === undefined ? page?.next_cursor : more.cursor;
  async function older() {
    try {
      const found = await api.get(`/v1/webhooks/${webhookId}/deliveries${query({ limit: 50, cursor })}`);
      setMore({ items: [...more.items, ...found.deliveries], cursor: found.next_cursor });
    } catch (failure) {
      setError(failure);
    }
  }
  return (
    <>
      <h2>Deliveries</h2>
      <Failure error={error} />
      {deliveries.length > 0 && (
        <div class="table-scroll">
          <table id="deliveries" class="admin-table">
            <thead>
              <tr><th>task</th><th>event</th><th>status</th><th>attempts</th><th>next attempt</th><th /></tr>
            </thead>
            <tbody>
              {deliveries.map((delivery) => (
                <tr data-delivery={delivery.id} data-status={delivery.status} key={delivery.id}>
                  <td><a class="mono" href={href(["runs", delivery.task_id])} title={delivery.task_id}>{shortId(delivery.task_id)}</a></td>
                  <td>
                    <span class="tag" data-state={delivery.state}>{delivery.state.replace("_", " ")}</span>
                    <span class="muted"> #{delivery.event_seq} · <Ago iso={delivery.occurred_at} /></span>
                  </td>
                  <td><span class={`delivery-status ${delivery.status}`}>{delivery.in_flight ? "sending" : delivery.status}</span></td>
                  <td><Attempts delivery={delivery} /></td>
                  <td>{delivery.next_attempt_at ? <time dateTime={delivery.next_attempt_at}>{dateTime(delivery.next_attempt_at)}</time> : ""}</td>
                  <td>
                    <ConfirmButton label="Redeliver" title="Send this delivery again?"
                      detail={`Sent again now, with the same webhook-id and body (receivers can tell it is the same event), and retried as a new delivery would be.${enabled ? "" : " The webhook is disabled: enable it first."}`}
                      onConfirm={async () => {
                        await api.post(`/v1/deliveries/${delivery.id}/redeliver`);
                        onChange();
                      }} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {cursor && <button type="button" class="older" onClick={older}>Older</button>}
      {page && deliveries.length === 0 && <Empty>Nothing delivered yet.</Empty>}
    </>
  );
}

function Attempts({ delivery }) {
  if (!delivery.attempt_log.length) return <span class="muted">none yet</span>;
  return (
    <ol class="attempts">
      {delivery.attempt_log.map((attempt) => (
        <li data-attempt={attempt.attempt}>
          <span class={`code ${attempt.status_code && attempt.status_code < 300 ? "ok" : "bad"}`}>
            {attempt.status_code ?? "no answer"}
          </span>{" "}
          <Ago iso={attempt.started_at} /> <span class="muted">in {span(attempt.duration_ms / 1000)}</span>
          {attempt.error && <Content value={attempt.error} lines={3} />}
        </li>
      ))}
    </ol>
  );
}
