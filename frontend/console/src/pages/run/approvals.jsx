// Tool calls that wait for a person (input_request.kind "approvals"): a card per
// undecided call, with its tool, the profile's note, its arguments, an editor for
// them, Approve and Deny; decided calls say how they were decided. Decisions go one
// by one (POST /v1/tasks/{id}/input), the task running again once none is left; the
// questions asked in the same model response are answered with a decision.

import { useState } from "preact/hooks";
import { api } from "../../api.js";
import { Ago, Content, dateTime } from "../../ui.jsx";

// A decision in words: "approved by key:…, arguments edited", "denied by open: why".
export function approvalText(approval) {
  if (!approval) return "";
  const by = approval.by ? ` by ${approval.by}` : "";
  if (approval.approved) return `approved${by}${approval.edited ? ", arguments edited" : ""}`;
  return `denied${by}${approval.reason ? `: ${approval.reason}` : ""}`;
}

// A decision as a call's part of the conversation or row of the calls table shows it.
export function ApprovalSaid({ approval }) {
  if (!approval) return null;
  return (
    <div class={`approval-said ${approval.approved ? "approved" : "denied"}`} title={approval.at ? dateTime(approval.at) : undefined}>
      {approvalText(approval)}
    </div>
  );
}

// The edited arguments, or why they cannot be sent: { arguments } or { error }.
export function parseArguments(text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (failure) {
    return { error: `The arguments are not JSON: ${failure.message}` };
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    return { error: "The arguments are a JSON object: { \"name\": value, … }" };
  }
  return { arguments: value };
}

export function Approvals({ task, onTask }) {
  const request = task.input_request;
  const calls = request.approvals || [];
  const undecided = calls.filter((call) => !call.decision);
  const questions = (request.questions || []).filter((question) => !("answer" in question));
  const [answers, setAnswers] = useState({});

  // One call's decision, with the answers to the questions when they are all written
  // (the last decision needs them: the run goes on only once everything is settled).
  async function decide(call, decision) {
    const body = { approvals: { [call.id]: decision } };
    const written = questions.filter((question) => (answers[question.id] || "").trim());
    if (questions.length && written.length === questions.length) {
      body.answers = Object.fromEntries(questions.map((question) => [question.id, answers[question.id]]));
    } else if (questions.length && undecided.length === 1) {
      throw new Error("Answer the agent's questions above too: the run goes on once every call is decided and every question answered.");
    }
    onTask(await api.post(`/v1/tasks/${task.id}/input`, body));
  }

  return (
    <section class="card approvals" id="approvals">
      <h2>
        {undecided.length === 0
          ? "Every tool call is decided"
          : undecided.length === 1
            ? "A tool call waits for your approval"
            : `${undecided.length} tool calls wait for your approval`}
      </h2>
      <p class="muted intro">
        The call is not made until you decide. Approve it as the model asked, or with the arguments edited;
        deny it with a reason, which the model reads as the call's result.
      </p>
      {task.paused && (
        <p class="paused-too">This run is paused: your decisions are kept, and it goes on once it is resumed.</p>
      )}
      {request.deadline && (
        <p class="deadline">
          Decide by <time dateTime={request.deadline}>{dateTime(request.deadline)}</time>: then{" "}
          {request.on_timeout === "fail" ? "the task fails" : "the calls still undecided are denied"}.
        </p>
      )}
      {questions.length > 0 && (
        <fieldset class="questions">
          <legend>The agent also asks</legend>
          {questions.map((question) => (
            <label class="question" key={question.id}>
              <span class="asked">{question.question ?? "(no question text)"}</span>
              <textarea name={question.id} rows={2} value={answers[question.id] || ""}
                onInput={(event) => setAnswers({ ...answers, [question.id]: event.currentTarget.value })} />
            </label>
          ))}
        </fieldset>
      )}
      {calls.map((call) =>
        call.decision ? <Decided call={call} key={call.id} /> : <Undecided call={call} decide={decide} key={call.id} />,
      )}
    </section>
  );
}

function Decided({ call }) {
  const { decision } = call;
  return (
    <article class="approval decided" data-call={call.id}>
      <header>
        <span class="mono tool">{call.tool}</span> <ApprovalSaid approval={decision} />
      </header>
      {decision.at && <p class="muted when"><Ago iso={decision.at} />; the run goes on once every call is decided.</p>}
    </article>
  );
}

function Undecided({ call, decide }) {
  const initial = JSON.stringify(call.arguments ?? {}, null, 2);
  const [text, setText] = useState(initial);
  const [reason, setReason] = useState("");
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const edited = text !== initial;

  async function act(decision) {
    setBusy(true);
    setError(null);
    try {
      await decide(call, decision);
    } catch (failure) {
      setError(failure.message || String(failure));
    } finally {
      setBusy(false);
    }
  }
  function approve() {
    if (!edited) return act({ approve: true });
    const parsed = parseArguments(text);
    if (parsed.error) return setError(parsed.error);
    return act({ approve: true, arguments: parsed.arguments });
  }
  function deny(event) {
    event.preventDefault();
    const why = reason.trim();
    act(why ? { approve: false, reason: why } : { approve: false });
  }

  return (
    <article class="approval" data-call={call.id} data-tool={call.tool}>
      <header>
        <span class="muted">the model calls</span> <strong class="mono tool">{call.tool}</strong>
      </header>
      {call.note && <p class="note">{call.note}</p>}
      <div class="arguments">
        <span class="muted label">with the arguments</span>
        <Content value={call.arguments ?? {}} lines={16} />
      </div>
      <details class="edit">
        <summary>Edit the arguments</summary>
        <label>
          the arguments to make the call with (JSON, checked against the tool's schema)
          <textarea name="arguments" class="mono" rows={Math.min(14, initial.split("\n").length + 1)} spellcheck={false}
            value={text} onInput={(event) => { setText(event.currentTarget.value); setError(null); }} />
        </label>
        <div class="row">
          {edited && <button type="button" class="link" onClick={() => { setText(initial); setError(null); }}>Undo the edits</button>}
          {call.schema && (
            <details class="schema">
              <summary>the tool's schema</summary>
              <Content value={call.schema} lines={12} />
            </details>
          )}
        </div>
      </details>
      {error && <p class="error problem" role="alert">{error}</p>}
      <div class="decide">
        <button type="button" class="primary approve" disabled={busy} onClick={approve}>
          {edited ? "Approve with these arguments" : "Approve"}
        </button>
        <form class="deny" onSubmit={deny}>
          <label>
            reason for denying (the model reads it)
            <input name="reason" value={reason} maxLength={2000} placeholder="why not"
              onInput={(event) => setReason(event.currentTarget.value)} />
          </label>
          <button type="submit" class="danger" disabled={busy}>Deny</button>
        </form>
      </div>
    </article>
  );
}
