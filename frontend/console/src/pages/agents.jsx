// Agents: the profiles a task may name (GET /v1/agents), what each runs with, and a
// link to its runs.

import "./admin.css";
import { api } from "../api.js";
import { href } from "../router.js";
import { Content, Empty, Failure, useLoad } from "../ui.jsx";

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
          <article class="agent card" data-agent={agent.name} key={agent.name}>
            <div class="head">
              <h2>{agent.name}</h2>
              <a href={href(["runs"], { agent: agent.name })}>Runs of {agent.name}</a>
            </div>
            {agent.description && <p class="description">{agent.description}</p>}
            <dl class="facts">
              <dt>model</dt><dd class="mono">{agent.model}</dd>
              <dt>tools</dt>
              <dd>
                {agent.tools.length
                  ? <span class="tags">{agent.tools.map((tool) => <span class="tag mono">{tool}</span>)}</span>
                  : <span class="muted">none</span>}
              </dd>
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
