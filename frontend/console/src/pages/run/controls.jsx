// What an operator can do to a run, in one bar built once for every control.

import { useRef, useState } from "preact/hooks";
import { api } from "../../api.js";
import { ConfirmButton, TERMINAL } from "../../ui.jsx";
import { ForkButton, forkNeeds } from "./fork.jsx";

// The controls bar, for every state: Cancel for the states that are not terminal,
// Fork for every state (pause and approve land in its `.bar` too). The forms below it
// (answer the questions, send a follow-up) take the page's width.
export function RunControls({ task, messages, onTask }) {
  const terminal = TERMINAL.has(task.state);
  const asks = task.state === "input_required" && task.input_request?.kind === "questions";
  const follows = !terminal && !asks;
  return (
    <section class="run-controls" id="run-controls">
      <div class="bar">
        {!terminal && <CancelButton task={task} onTask={onTask} />}
        <ForkButton
          task={task}
          at={null}
          id="fork"
          label="Fork"
          title="Fork this run from where it is"
          needs={forkNeeds(messages.map((m) => m.message), messages.length) ?? "optional"}
          explain="A new run begins with all of this run's conversation so far and goes on from there (to fork from an earlier step, use a message's fork from here)."
        />
        {/* pause / approve: here */}
      </div>
      {asks && <AnswerForm task={task} onTask={onTask} />}
      {follows && <FollowUp task={task} onTask={onTask} />}
    </section>
  );
}

function CancelButton({ task, onTask }) {
  const reason = useRef(null);
  return (
    <ConfirmButton
      id="cancel"
      label="Cancel"
      title="Cancel this run?"
      confirm="Cancel the run"
      danger
      detail={
        <>
          It stops where it is and ends <strong>cancelled</strong>; its subtasks that are still running
          are cancelled too (detached ones run on), and its webhooks are told. This cannot be undone.
          <label class="reason">
            reason (optional)
            <input name="reason" ref={reason} maxLength={2000} placeholder="why" />
          </label>
        </>
      }
      onConfirm={async () => {
        const text = reason.current?.value.trim();
        onTask(await api.post(`/v1/tasks/${task.id}/cancel`, text ? { reason: text } : {}));
      }}
    />
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
