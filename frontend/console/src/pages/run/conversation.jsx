// The conversation with the model, part by part, and the answer as it is written.

import { Content, dateTime } from "../../ui.jsx";
import { ApprovalSaid } from "./approvals.jsx";
import { MessageForks } from "./fork.jsx";

// Tool arguments arrive as a JSON string or an object: shown as indented JSON.
function asJson(value) {
  if (typeof value !== "string") return value ?? {};
  try {
    return JSON.parse(value);
  } catch {
    return value;
  }
}

function content(value) {
  if (Array.isArray(value)) return value.map((item) => (typeof item === "string" ? item : JSON.stringify(item))).join("\n");
  return value;
}

// `approval`: the decision on this call, when it waited for one (from the calls' rows).
function Part({ part, approval }) {
  switch (part.part_kind) {
    case "user-prompt":
      return <div class="part user-prompt"><div class="kind">prompt</div><Content value={content(part.content)} /></div>;
    case "system-prompt":
      return <div class="part system-prompt"><div class="kind">system prompt</div><Content value={part.content} lines={4} /></div>;
    case "text":
      return <div class="part text"><Content value={part.content} lines={40} /></div>;
    case "thinking":
      return <div class="part thinking"><div class="kind">thinking</div><Content value={part.content} lines={6} /></div>;
    case "tool-call":
      return (
        <div class="part tool-call" data-tool={part.tool_name}>
          <div class="kind">→ calls <span class="mono">{part.tool_name}</span></div>
          <Content value={asJson(part.args)} lines={12} />
          <ApprovalSaid approval={approval} />
          {approval?.edited && (
            <div class="made-with"><span class="muted">made with</span><Content value={approval.arguments} lines={12} /></div>
          )}
        </div>
      );
    case "tool-return":
      return (
        <div class="part tool-return" data-tool={part.tool_name}>
          <div class="kind">← <span class="mono">{part.tool_name}</span> returned</div>
          <Content value={part.content} lines={8} />
        </div>
      );
    case "retry-prompt":
      return (
        <div class="part retry-prompt">
          <div class="kind error">retry{part.tool_name ? ` ${part.tool_name}` : ""}</div>
          <Content value={part.content} lines={8} />
        </div>
      );
    default:
      return <div class="part other"><div class="kind">{part.part_kind || "part"}</div><Content value={part} lines={6} /></div>;
  }
}

export function Conversation({ task, messages, writing, calls = [] }) {
  const ledger = messages.map((m) => m.message);
  const approvals = new Map(calls.filter((call) => call.approval).map((call) => [call.tool_call_id, call.approval]));
  return (
    <section class="conversation">
      <h2>Conversation</h2>
      <div id="conversation">
        {messages.map((m) => (
          <article class={`bubble ${m.kind}`} data-position={m.position} key={m.position}>
            <header class="who">
              {m.kind === "request" ? "to the model" : "model"}
              <span class="muted"> · #{m.position} · attempt {m.attempt} · <time dateTime={m.created_at}>{dateTime(m.created_at)}</time></span>
            </header>
            {(m.message?.parts || []).map((part, i) => <Part part={part} approval={approvals.get(part.tool_call_id)} key={i} />)}
            <MessageForks task={task} messages={ledger} message={{ ...m.message, position: m.position }} />
          </article>
        ))}
        {!messages.length && !writing && <p class="muted none">No messages yet.</p>}
      </div>
      <div id="writing">
        {writing && (
          <article class="bubble response live" aria-live="polite">
            <header class="who">model, writing…</header>
            {writing.parts.filter(Boolean).map((part, i) => (
              <pre key={i} class={part.kind === "text" ? "" : "muted"}>
                {part.kind === "tool_call" ? `→ ${part.tool ?? ""}(${part.text}` : part.text}
              </pre>
            ))}
            <span class="caret" aria-hidden="true" />
          </article>
        )}
      </div>
    </section>
  );
}
