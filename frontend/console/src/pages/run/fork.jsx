// Forks: a new run from a step of this one's conversation (POST /v1/tasks/{id}/fork).
// The positions a fork may take follow the server's rule (domain/forks.py), so that
// each message offers only what works; the server checks again and says why not.
// Every fork may be given a budget of its own (`max_cost`, `max_tokens`): a run that
// ran out of its budget goes on in a fork with a larger one.

import { useRef, useState } from "preact/hooks";
import { api } from "../../api.js";
import { budgetText } from "../../budget.jsx";
import { href, navigate } from "../../router.js";
import { shortId } from "../../ui.jsx";

const tools = (message) =>
  message?.kind === "response" ? (message.parts || []).filter((p) => p.part_kind === "tool-call").map((p) => p.tool_name) : [];
const calls = (message) => tools(message).length > 0;

// Positions whose copy would hold a spawn of subtasks but not the wait collecting them.
function uncollected(messages) {
  const refused = new Set();
  messages.forEach((message, spawn) => {
    if (!tools(message).includes("spawn_subtask")) return;
    const wait = messages.findIndex((m, j) => j > spawn && tools(m).includes("wait_for_subtasks"));
    if (wait < 0) return;
    for (let at = spawn + 2; at < Math.min(wait + 2, messages.length + 1); at += 1) refused.add(at);
  });
  return refused;
}

// Where a fork may be made in `messages` (ledger order), with a message added or not.
export function forkPositions(messages, withMessage) {
  const end = messages.length;
  const valid = [0];
  const refused = uncollected(messages);
  for (let at = 1; at <= end; at += 1) {
    const before = messages[at - 1];
    if (refused.has(at)) continue;
    if (before.kind !== "response") {
      if (!withMessage) valid.push(at);
    } else if (calls(before)) {
      if (at === end) valid.push(at);
    } else if (withMessage) {
      valid.push(at);
    }
  }
  return valid;
}

// What a fork at `at` needs of the person: nothing (the text is optional), a text, or
// it is not offered.
export function forkNeeds(messages, at) {
  if (forkPositions(messages, false).includes(at)) return "optional";
  if (forkPositions(messages, true).includes(at)) return "text";
  return null;
}

export function userText(message) {
  if (message?.kind !== "request") return null;
  const prompt = (message.parts || []).find((p) => p.part_kind === "user-prompt");
  if (!prompt) return null;
  return typeof prompt.content === "string" ? prompt.content : JSON.stringify(prompt.content);
}

// The fork's budget fields (the dialog fills them as it opens); empty: the source's.
function BudgetFields({ task }) {
  const now = budgetText(task);
  return (
    <fieldset class="fork-budget">
      <legend>budget (optional)</legend>
      <label>
        max cost (USD)
        <input name="max_cost" inputmode="decimal" autocomplete="off" pattern="[0-9]*[.]?[0-9]+"
          placeholder={task.max_cost ?? "none"} />
      </label>
      <label>
        max tokens
        <input name="max_tokens" type="number" min="1" step="1" inputmode="numeric" placeholder={task.max_tokens ?? "none"} />
      </label>
      <p class="hint">
        Empty: this run's ({now || "none"}). A fork's spend starts at zero.
      </p>
    </fieldset>
  );
}

// A button that opens the fork dialog: `at` (null: the end of the ledger), the text it
// starts with, whether a text is needed, what the dialog says it does, and the budget
// its fields start with (`{max_cost, max_tokens}`, as text; unset: empty).
export function ForkButton({ task, at, label, title, text = "", needs = "optional", explain, budget = {}, ...rest }) {
  const dialog = useRef(null);
  const input = useRef(null);
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  async function fork(event) {
    event.preventDefault();
    const message = input.current.value;
    if (needs === "text" && !message.trim()) {
      setError("Write the message the new run continues with.");
      return;
    }
    setBusy(true);
    setError(null);
    try {
      const body = at === null ? {} : { at };
      if (message.trim()) body.input = message;
      const fields = event.currentTarget.elements;
      const cost = fields.max_cost.value.trim();
      const most = fields.max_tokens.value.trim();
      if (cost) body.max_cost = cost; // a decimal string: kept exact
      if (most) body.max_tokens = Number(most);
      const made = await api.post(`/v1/tasks/${task.id}/fork`, body);
      dialog.current.close();
      navigate(href(["runs", made.id]));
    } catch (failure) {
      setError(failure.message || String(failure));
    } finally {
      setBusy(false);
    }
  }
  function open() {
    setError(null);
    input.current.value = text;
    const fields = input.current.form.elements;
    fields.max_cost.value = budget.max_cost ?? "";
    fields.max_tokens.value = budget.max_tokens ?? "";
    dialog.current.showModal();
  }
  return (
    <>
      <button type="button" onClick={open} {...rest}>{label}</button>
      <dialog ref={dialog} class="confirm fork-dialog">
        <form method="dialog" onSubmit={fork}>
          <h2>{title}</h2>
          <p>
            {explain} No tool call recorded before that point runs again: the new run reads
            its recorded result. This run ({shortId(task.id)}) is not changed.
          </p>
          <label class="fork-text">
            {needs === "text" ? "your message (needed here)" : "a message to add (optional)"}
            <textarea name="input" ref={input} rows={4} maxLength={100000} />
          </label>
          <BudgetFields task={task} />
          {error && <p class="error" role="alert">{error}</p>}
          <div class="buttons">
            <button type="button" onClick={() => dialog.current.close()}>Keep it</button>
            <button type="submit" class="primary" disabled={busy}>Fork</button>
          </div>
        </form>
      </dialog>
    </>
  );
}

// The actions under one message of the conversation: edit a user's message (a fork at
// its position with the new text), or fork after it.
export function MessageForks({ task, messages, message }) {
  const at = message.position;
  const prompt = userText(message);
  const edit = prompt !== null && forkPositions(messages, true).includes(at);
  const after = forkNeeds(messages, at + 1);
  if (!edit && !after) return null;
  return (
    <div class="message-forks">
      {edit && (
        <ForkButton
          task={task}
          at={at}
          class="fork-edit link"
          label="edit & fork"
          title={`Fork with message #${at} edited`}
          text={prompt}
          needs="text"
          explain={
            at === 0
              ? "A new run starts over, with your edited message as its prompt."
              : `A new run begins with this run's first ${at} messages, then your edited message instead of #${at}.`
          }
        />
      )}
      {after && (
        <ForkButton
          task={task}
          at={at + 1}
          class="fork-after link"
          label="fork from here"
          title={`Fork after message #${at}`}
          needs={after}
          explain={
            after === "text"
              ? `A new run begins with this run's first ${at + 1} messages (up to the model's answer), then your message.`
              : `A new run begins with this run's first ${at + 1} messages and goes on from there.`
          }
        />
      )}
    </div>
  );
}
