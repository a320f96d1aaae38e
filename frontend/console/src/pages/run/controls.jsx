// What an operator can do to a run, in one bar built once for every control.

import { useState } from "preact/hooks";
import { api } from "../../api.js";
import { ReasonButton, TERMINAL } from "../../ui.jsx";
import { Approvals } from "./approvals.jsx";
import { ForkButton, forkNeeds } from "./fork.jsx";

// The controls bar, for every state: Cancel, and Pause or Resume, for the states that
// are not terminal, Fork for every state. The forms below it (decide on tool calls,
// answer the questions, send a follow-up) take the page's width.
export function RunControls({ task, messages, onTask }) {
  const terminal = TERMINAL.has(task.state);
  const kind = task.state === "input_required" ? task.input_request?.kind : null;
  const asks = kind === "questions";
  const approves = kind === "approvals";
  const follows = !terminal && !asks && !approves;
  return (
    <section class="run-controls" id="run-controls">
      <div class="bar">
        {!terminal && <CancelButton task={task} onTask={onTask} />}
        {!terminal && !task.paused && <PauseButton task={task} onTask={onTask} />}
        {!terminal && task.paused && <ResumeButton task={task} onTask={onTask} />}
        <ForkButton
          task={task}
          at={null}
          id="fork"
          label="Fork"
          title="Fork this run from where it is"
          needs={forkNeeds(messages.map((m) => m.message), messages.length) ?? "optional"}
          explain="A new run begins with all of this run's conversation so far and goes on from there (to fork from an earlier step, use a message's fork from here)."
        />
      </div>
      {approves && <Approvals task={task} onTask={onTask} />}
      {asks && <AnswerForm task={task} onTask={onTask} />}
      {follows && <FollowUp task={task} onTask={onTask} />}
    </section>
  );
}

function CancelButton({ task, onTask }) {
  return (
    <ReasonButton
      id="cancel"
      label="Cancel"
      title="Cancel this run?"
      confirm="Cancel the run"
      danger
      detail={
        <>
          It stops where it is and ends <strong>cancelled</strong>; its subtasks that are still running
          are cancelled too (detached ones run on), and its webhooks are told. This cannot be undone.
        </>
      }
      onConfirm={async (reason) => onTask(await api.post(`/v1/tasks/${task.id}/cancel`, reason ? { reason } : {}))}
    />
  );
}

// A hold on the run, with an optional reason; it says what a pause does in this state.
function PauseButton({ task, onTask }) {
  return (
    <ReasonButton
      id="pause"
      label="Pause"
      title="Pause this run?"
      confirm="Pause the run"
      dismiss="Let it run"
      detail={
        <>
          {task.state === "running"
            ? "Its run stops within a second or so (a tool call in flight finishes and is recorded first) and gives its worker back. "
            : "No worker takes it while it is paused. "}
          It keeps its state and its conversation; <strong>Resume</strong> lets it go on from where it stopped,
          repeating no finished tool call. Its time paused does not count against its timeout.
        </>
      }
      onConfirm={async (reason) => onTask(await api.post(`/v1/tasks/${task.id}/pause`, reason ? { reason } : {}))}
    />
  );
}

// Let go of the hold: the run goes on from its ledger.
function ResumeButton({ task, onTask }) {
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  async function resume() {
    setBusy(true);
    setError(null);
    try {
      onTask(await api.post(`/v1/tasks/${task.id}/resume`));
    } catch (failure) {
      setError(failure.message);
    } finally {
      setBusy(false);
    }
  }
  return (
    <>
      <button type="button" id="resume" class="primary" disabled={busy} onClick={resume}
        title="Let the run go on from where it stopped">
        Resume
      </button>
      {error && <span class="error" role="alert">{error}</span>}
    </>
  );
}

// One field per question the agent asks; the answers by question id.
function AnswerForm({ task, onTask }) {
  const questions = task.input_request.questions || [];
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  async function submit(event) {
    event.preventDefault();
    const answers = Object.fromEntries(new FormData(event.currentTarget));
    setBusy(true);
    setError(null);
    try {
      onTask(await api.post(`/v1/tasks/${task.id}/input`, { answers }));
    } catch (failure) {
      setError(failure.message);
    } finally {
      setBusy(false);
    }
  }
  return (
    <form class="card answer" id="answer" onSubmit={submit}>
      <h2>The agent asks</h2>
      {questions.map((question) => (
        <label class="question" key={question.id}>
          <span class="asked">{question.question ?? "(no question text)"}</span>
          <textarea name={question.id} required />
        </label>
      ))}
      {error && <p class="error" role="alert">{error}</p>}
      <p><button type="submit" class="primary" disabled={busy}>Answer</button></p>
    </form>
  );
}

// A message the run reads at its next model request.
function FollowUp({ task, onTask }) {
  const [text, setText] = useState("");
  const [said, setSaid] = useState(null);
  const [busy, setBusy] = useState(false);
  async function submit(event) {
    event.preventDefault();
    if (!text.trim()) return;
    setBusy(true);
    setSaid(null);
    try {
      const sent = await api.post(`/v1/tasks/${task.id}/messages`, { input: text });
      onTask(sent.task);
      setText("");
      setSaid({ ok: true, text: sent.delivery === "followup" ? "Queued: the run reads it at its next model request." : "Sent." });
    } catch (failure) {
      setSaid({ ok: false, text: failure.message });
    } finally {
      setBusy(false);
    }
  }
  return (
    <form class="followup" id="followup" onSubmit={submit}>
      <label>
        send the run a message
        <textarea name="text" rows={2} value={text} onInput={(event) => setText(event.currentTarget.value)}
          placeholder="a follow-up the agent reads at its next model request" />
      </label>
      <div class="row">
        <button type="submit" disabled={busy || !text.trim()}>Send</button>
        {task.followups > 0 && <span class="muted">{task.followups_read} of {task.followups} read</span>}
        {said && <span class={said.ok ? "muted" : "error"} role="status">{said.text}</span>}
      </div>
    </form>
  );
}
