// Agents: the profiles a task may name (GET /v1/agents), what each runs with, a link
// to its runs, and the operators' brake on each (pause every task of the profile for
// this tenant, and let them go).

import "./admin.css";
import { useState } from "preact/hooks";
import { api } from "../api.js";
import { href } from "../router.js";
import { Ago, ConfirmButton, Content, Empty, Failure, ReasonButton, useLoad } from "../ui.jsx";

const tasks = (n) => `${n} ${n === 1 ? "task" : "tasks"}`;

// The brake on one profile: on (who pulled it, when, why) with Resume all, or off with
// Pause all; each asks first, saying what it does; then how many tasks it changed.
function Brake({ agent, onChange }) {
  const [said, setSaid] = useState(null);
  const brake = agent.paused;
  const name = agent.name;
  async function pull(reason) {
    const changed = await api.post(`/v1/agents/${encodeURIComponent(name)}/pause`, reason ? { reason } : {});
    setSaid(`Paused ${tasks(changed.tasks)}.`);
    onChange();
  }
  async function release() {
    const changed = await api.post(`/v1/agents/${encodeURIComponent(name)}/resume`);
    setSaid(`Resumed ${tasks(changed.tasks)}.`);
    onChange();
  }
  return (
    <div class={`brake ${brake ? "on" : "off"}`}>
      {brake ? (
        <p class="brake-state" role="status">
          <strong>Paused</strong> for this tenant by <span class="mono">{brake.by ?? "someone"}</span>{" "}
          <Ago iso={brake.at} />
          {brake.reason ? `: ${brake.reason}` : ""}. Its tasks are held, and new ones wait.
        </p>
      ) : (
        <p class="brake-state muted">Running: no brake on it.</p>
      )}
      <div class="row">
        {brake ? (
          <ConfirmButton
            class="resume-all primary"
            label="Resume all"
            title={`Release the brake on ${name}?`}
            confirm="Resume all"
            dismiss="Keep them paused"
            detail={`Every task of ${name} that the brake paused goes on from where it stopped, and new tasks of ${name} run as usual. Tasks paused on their own stay paused.`}
            onConfirm={release}
          />
        ) : (
          <ReasonButton
            class="pause-all"
            label="Pause all"
            title={`Pause every task of ${name}?`}
            confirm="Pause all"
            dismiss="Let them run"
            detail={`Every task of ${name} for this tenant is held: running ones stop (a tool call in flight finishes first) and give their worker back; pending and waiting ones are not taken. New tasks of ${name} are accepted and wait, paused, until you resume.`}
            onConfirm={pull}
          />
        )}
        {said && <span class="muted said" role="status">{said}</span>}
      </div>
    </div>
  );
}

export function Agents() {
  const list = useLoad(() => api.get("/v1/agents"), []);
  const agents = list.data?.agents || [];
  return (
    <section class="admin agents">
      <div class="title"><h1>Agents</h1></div>
      <p class="muted intro">The agent profiles a task may name, as the service's configuration defines them.</p>
      <Failure error={list.error} />
      <div class="agents-list" id="agents">
        {agents.map((agent) => (
          <article class={`agent card${agent.paused ? " paused" : ""}`} data-agent={agent.name} key={agent.name}>
            <div class="head">
              <h2>{agent.name}</h2>
              <a href={href(["runs"], { agent: agent.name })}>Runs of {agent.name}</a>
            </div>
            {agent.description && <p class="description">{agent.description}</p>}
            <Brake agent={agent} onChange={list.reload} />
            <dl class="facts">
              <dt>model</dt><dd class="mono">{agent.model}</dd>
              <dt>tools</dt>
              <dd>
                {agent.tools.length
                  ? <span class="tags">{agent.tools.map((tool) => <span class="tag mono">{tool}</span>)}</span>
                  : <span class="muted">none</span>}
              </dd>
              {agent.approvals && (
                <>
                  <dt>approval</dt>
                  <dd class="approvals">
                    calls of{" "}
                    <span class="tags">{agent.approvals.tools.map((tool) => <span class="tag mono">{tool}</span>)}</span>{" "}
                    wait for a person
                    {agent.approvals.timeout_seconds !== null &&
                      ` (at most ${agent.approvals.timeout_seconds} s, then ${agent.approvals.on_timeout === "fail" ? "the task fails" : "denied"})`}
                  </dd>
                </>
              )}
              <dt>requests</dt><dd>at most {agent.request_limit} model requests a run</dd>
              <dt>output</dt><dd class="mono">{agent.output}</dd>
            </dl>
            <div class="prompt">
              <span class="muted label">system prompt</span>
              {agent.system_prompt ? <Content value={agent.system_prompt} lines={6} /> : <span class="muted"> none</span>}
            </div>
          </article>
        ))}
      </div>
      {!list.loading && !list.error && agents.length === 0 && <Empty>No agent profile is configured.</Empty>}
    </section>
  );
}
