// The run's head: who it is, where it stands, what it cost against its budget, when
// it ran.

import { useState } from "preact/hooks";
import { Cost } from "../../money.jsx";
import { href } from "../../router.js";
import { Ago, Content, Duration, StateBadge, TERMINAL, between, dateTime, span } from "../../ui.jsx";
import { BudgetStop, RunBudget } from "./budget.jsx";

function CopyId({ id }) {
  const [copied, setCopied] = useState(false);
  async function copy() {
    try {
      await navigator.clipboard.writeText(id);
      setCopied(true);
      setTimeout(() => setCopied(false), 1500);
    } catch {
      // No clipboard (an insecure origin): the id is selectable text.
    }
  }
  return (
    <button type="button" class="copy" onClick={copy} title="Copy the task id" aria-label="Copy the task id">
      {copied ? "copied" : "copy"}
    </button>
  );
}

// Attempts made and attempts lost, two figures: a claim is an attempt; only a lease
// that expired loses one (of max_attempts).
export function attemptsText(task) {
  const made = task.attempt ?? 0;
  const lost = task.lost_attempts ?? 0;
  const attempts = made ? `attempt ${made}` : "not started";
  return {
    attempts,
    lost: lost ? `${lost} lost (lease expired) of at most ${task.max_attempts}` : "",
  };
}

// A moment as a clock time (the date too when not today), "… ago" beside it.
function At({ iso }) {
  const when = new Date(iso);
  const today = when.toDateString() === new Date().toDateString();
  return (
    <span class="at">
      <time dateTime={iso} title={dateTime(iso)}>{today ? when.toLocaleTimeString() : dateTime(iso)}</time>{" "}
      <span class="muted">(<Ago iso={iso} />)</span>
    </span>
  );
}

function Usage({ usage }) {
  if (!usage || !Object.keys(usage).length) return null;
  const n = (value) => (value ?? 0).toLocaleString();
  const tokens = usage.total_tokens ?? (usage.input_tokens ?? 0) + (usage.output_tokens ?? 0);
  return (
    <span class="usage" title={JSON.stringify(usage)}>
      {n(usage.requests)} requests · {n(tokens)} tokens ({n(usage.input_tokens)} in, {n(usage.output_tokens)} out)
    </span>
  );
}

// What it cost, and, for a parent, what it and every task under it cost together
// (`usage.subtree`, read with the task).
function Spent({ usage }) {
  const subtree = usage?.subtree;
  return (
    <>
      <Cost usage={usage} />
      {subtree && (
        <span class="subtree" id="subtree-cost">
          {" "}· with subtasks: <Cost usage={subtree} />{" "}
          <span class="muted">({(subtree.tasks ?? 0).toLocaleString()} {subtree.tasks === 1 ? "task" : "tasks"})</span>
        </span>
      )}
    </>
  );
}

export function RunHead({ task, progress, messages = [] }) {
  const { attempts, lost } = attemptsText(task);
  const future = task.run_at && new Date(task.run_at) > Date.now();
  const error = task.error;
  return (
    <section class="card run-head" id="run-head">
      <div class="title">
        <h1 class="mono" id="run-id">{task.id}</h1>
        <CopyId id={task.id} />
        <StateBadge task={task} />
      </div>
      <dl class="facts">
        <div><dt>agent</dt><dd>{task.agent.profile}</dd></div>
        <div><dt>model</dt><dd class="mono">{task.agent.model}</dd></div>
        <div><dt>priority</dt><dd>{task.priority ?? 0}</dd></div>
        <div>
          <dt>attempts</dt>
          <dd class="attempts-cell">
            <span class="attempts">{attempts}</span>
            {lost && <span class="lost"> · {lost}</span>}
          </dd>
        </div>
        {task.context_id && (
          <div><dt>context</dt><dd><a class="mono context" href={href(["runs"], { context_id: task.context_id })}>{task.context_id}</a></dd></div>
        )}
        {task.forked_from && (
          <div>
            <dt>forked from</dt>
            <dd class="forked-from">
              {task.forked_from.task_id
                ? <a class="mono" href={`#/runs/${task.forked_from.task_id}`} title={task.forked_from.task_id}>{task.forked_from.task_id}</a>
                : <span class="muted">a deleted task</span>}
              <span class="muted"> at #{task.forked_from.at}</span>
            </dd>
          </div>
        )}
        {task.parent_id && (
          <div><dt>parent</dt><dd><a class="mono parent" href={`#/runs/${task.parent_id}`}>{task.parent_id}</a></dd></div>
        )}
        <div><dt>created</dt><dd><At iso={task.created_at} /></dd></div>
        {future && <div><dt>scheduled</dt><dd class="run-at">not before {dateTime(task.run_at)}</dd></div>}
        {task.started_at && (
          <div>
            <dt>started</dt>
            <dd><At iso={task.started_at} /> <span class="muted">· after {span(Math.max(0, between(task.created_at, task.started_at)))}</span></dd>
          </div>
        )}
        {task.finished_at && <div><dt>finished</dt><dd><At iso={task.finished_at} /></dd></div>}
        {task.started_at && <div><dt>{TERMINAL.has(task.state) ? "ran" : "so far"}</dt><dd><Duration task={task} /></dd></div>}
        <div><dt>usage</dt><dd><Usage usage={task.usage} /></dd></div>
        <div><dt>cost</dt><dd id="run-cost"><Spent usage={task.usage} /></dd></div>
        <RunBudget task={task} />
      </dl>
      {progress && !TERMINAL.has(task.state) && (
        <div class="progress-row">
          <progress max="100" value={progress.percent} />
          <span class="muted">{progress.percent}% {progress.note ?? ""}</span>
        </div>
      )}
      {error && (
        <div class="run-error error" role="alert">
          <strong class="mono">{error.code || error.type || "error"}</strong>{" "}
          {error.message || ""}
          {!error.message && <Content value={error} />}
          <BudgetStop task={task} messages={messages} />
        </div>
      )}
      {task.paused && !TERMINAL.has(task.state) && <Paused task={task} />}
      {task.cancel_reason && <p class="muted cancel-reason">cancelled: {task.cancel_reason}</p>}
    </section>
  );
}

// Who holds it, since when and why; held by its profile's brake, it says so (and that
// Resume lets this one go alone).
function Paused({ task }) {
  const { by, at, reason, scope } = task.paused;
  const profile = task.agent.profile;
  return (
    <div class="paused-note" id="paused" role="status">
      <strong>Paused</strong> by <span class="mono by">{by ?? "someone"}</span>
      {at && <> at <At iso={at} /></>}
      {reason ? <>: <span class="reason">{reason}</span></> : <span class="muted"> (no reason given)</span>}
      {scope === "agent" && (
        <p class="brake muted">
          Held by the <a href="#/agents">{profile} profile's brake</a>: every task of {profile} is paused until
          it is released (Resume here lets this one go alone).
        </p>
      )}
      <p class="muted what">
        No worker runs it while it is paused (a run under way stops once no tool call is in flight);
        Resume lets it go on from where it stopped.
      </p>
    </div>
  );
}

// What it was given and what it gave back.
export function RunIO({ task }) {
  const metadata = task.metadata && Object.keys(task.metadata).length ? task.metadata : null;
  return (
    <section class="run-io">
      <h2>Input</h2>
      <div id="input"><Content value={task.input} /></div>
      {metadata && (
        <>
          <h2>Metadata</h2>
          <div id="metadata"><Content value={metadata} lines={8} /></div>
        </>
      )}
      {task.result !== null && task.result !== undefined && (
        <>
          <h2>Result</h2>
          <div id="result"><Content value={task.result} /></div>
        </>
      )}
    </section>
  );
}
