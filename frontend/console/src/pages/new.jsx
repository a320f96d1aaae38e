// New task: an agent (from /v1/agents), the input (text, or a JSON object when it
// parses as one: the form says which), and what else a submit may say; on 201 the
// task's page, on an error the API's own words beside the form (a refusal for a spent
// budget says when to try again). The task template's fields (`TaskFields`,
// `template`) are the schedules page's too.

import "./tenant.css";
import { useState } from "preact/hooks";
import { api } from "../api.js";
import { Until } from "../budget.jsx";
import { href, navigate } from "../router.js";
import { useAction, useLoad } from "../ui.jsx";

// The input as the API takes it: a JSON object when the text is one, else the text.
export function parseInput(text) {
  const trimmed = text.trim();
  if (trimmed.startsWith("{")) {
    try {
      const value = JSON.parse(trimmed);
      if (value && typeof value === "object" && !Array.isArray(value)) return value;
    } catch {
      // text, then
    }
  }
  return text;
}

function jsonObject(text, name) {
  let value;
  try {
    value = JSON.parse(text);
  } catch {
    throw new Error(`${name}: not JSON (a JSON object, e.g. {"ticket": "T-1"})`);
  }
  if (!value || typeof value !== "object" || Array.isArray(value)) throw new Error(`${name}: must be a JSON object`);
  return value;
}

// A task template from a form holding `TaskFields`: only the fields filled in.
export function template(form) {
  const field = (name) => (form.elements[name] ? form.elements[name].value.trim() : "");
  const body = { input: parseInput(form.elements.input.value) };
  for (const name of ["agent", "model", "system_prompt", "context_id"]) if (field(name)) body[name] = field(name);
  for (const name of ["priority", "max_attempts", "timeout_seconds", "max_tokens"]) if (field(name)) body[name] = Number(field(name));
  if (field("max_cost")) body.max_cost = field("max_cost"); // a decimal string: kept exact
  if (field("metadata")) body.metadata = jsonObject(field("metadata"), "metadata");
  return body;
}

const keys = (object) => {
  const n = Object.keys(object).length;
  return `${n} ${n === 1 ? "key" : "keys"}`;
};

// The input's kind, as it will be sent.
function InputHint({ text }) {
  if (!text.trim()) return <span class="hint">Text, or a JSON object (given to the agent as JSON).</span>;
  const parsed = parseInput(text);
  return typeof parsed === "string"
    ? <span class="hint" data-kind="text">Sent as text.</span>
    : <span class="hint json" data-kind="json">Sent as a JSON object ({keys(parsed)}).</span>;
}

// The fields of a task template: the new task form's and a schedule's task.
export function TaskFields({ agents, agent = "" }) {
  const [input, setInput] = useState("");
  const [chosen, setChosen] = useState(agent);
  const list = agents || [];
  const profile = list.find((one) => one.name === chosen) || list[0];
  return (
    <>
      <label>
        agent
        <select name="agent" value={chosen || (profile ? profile.name : "")} onChange={(event) => setChosen(event.currentTarget.value)}>
          {list.map((one) => <option value={one.name}>{one.name}</option>)}
        </select>
        {profile && <span class="hint">{profile.description || `model ${profile.model}`}</span>}
      </label>
      <label>
        model (optional)
        <input name="model" placeholder={profile ? profile.model : "the profile's"} autocomplete="off" />
      </label>
      <label>
        priority
        <input name="priority" type="number" step="1" placeholder="0" inputmode="numeric" />
      </label>
      <label>
        max attempts
        <input name="max_attempts" type="number" step="1" placeholder="the service's" inputmode="numeric" />
      </label>
      <label>
        max cost (optional, USD)
        <input name="max_cost" inputmode="decimal" autocomplete="off" pattern="[0-9]*[.]?[0-9]+"
          placeholder="the profile's" />
      </label>
      <label>
        max tokens (optional)
        <input name="max_tokens" type="number" min="1" step="1" inputmode="numeric" placeholder="the profile's" />
      </label>
      <label class="full">
        input
        <textarea name="input" required rows={5} value={input} onInput={(event) => setInput(event.currentTarget.value)}
          placeholder={profile && profile.name === "demo" ? "For the demo agent: take 20s, ask, spawn 2" : "What the agent should do"} />
        <InputHint text={input} />
      </label>
      <label class="full">
        system prompt (optional)
        <textarea name="system_prompt" rows={2} placeholder={profile && profile.system_prompt ? profile.system_prompt : "the profile's"} />
      </label>
      <label class="full">
        metadata (optional JSON object)
        <textarea name="metadata" rows={2} placeholder='{"ticket": "T-1"}' spellcheck={false} />
      </label>
    </>
  );
}

// An error from the API (problem+json: its detail) or from the form itself; a refusal
// to be tried again later (a 429: a spent budget, a rate limit) says when.
export function FormError({ error }) {
  if (!error) return null;
  const wait = error.status === 429 ? Number(error.problem?.retry_after) : NaN;
  const spent = String(error.problem?.type ?? "").endsWith("/budget-exhausted");
  const text = error.message || String(error);
  return (
    <p class="error form-error" role="alert" data-status={error.status}>
      {spent && <strong>Budget exhausted: </strong>}
      {text}
      {Number.isFinite(wait) && (
        <span class="retry">
          {/[.!?]$/.test(text) ? "" : "."} Try again after <Until at={new Date(Date.now() + wait * 1000)} />.
        </span>
      )}
    </p>
  );
}

export function NewTask({ route }) {
  const agents = useLoad(() => api.get("/v1/agents"), []);
  const { busy, error, setError, run } = useAction();
  async function submit(event) {
    event.preventDefault();
    const form = event.currentTarget;
    setError(null);
    let body;
    try {
      body = template(form);
      const runAt = form.elements.run_at.value;
      if (runAt) body.run_at = new Date(runAt).toISOString();
    } catch (failure) {
      setError(failure);
      return;
    }
    await run(async () => {
      const task = await api.post("/v1/tasks", body);
      navigate(href(["runs", task.id]));
    });
  }
  return (
    <section class="new-task">
      <div class="title">
        <h1>New task</h1>
        <a href="#/runs">Back to runs</a>
      </div>
      {agents.error && <FormError error={agents.error} />}
      <form class="card tenant-form" id="new-task" onSubmit={submit}>
        {agents.data && <TaskFields agents={agents.data.agents} agent={route.params.get("agent") || ""} />}
        <label>
          run at (optional, your local time)
          <input name="run_at" type="datetime-local" />
        </label>
        <FormError error={error} />
        <div class="actions">
          <button type="submit" class="primary" disabled={busy || !agents.data}>Submit</button>
        </div>
      </form>
    </section>
  );
}
