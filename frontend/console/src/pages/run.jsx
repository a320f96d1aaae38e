// One run: what it was asked and answered, its state kept live.

import { useEffect, useState } from "preact/hooks";
import { api, follow } from "../api.js";
import { Ago, Content, Duration, Failure, StateBadge, TERMINAL } from "../ui.jsx";

export function Run({ id }) {
  const [task, setTask] = useState(null);
  const [error, setError] = useState(null);
  useEffect(() => {
    let current = true;
    setTask(null);
    setError(null);
    const load = () => api.get(`/v1/tasks/${id}`).then(
      (found) => current && setTask(found),
      (failure) => current && setError(failure),
    );
    load();
    const stream = follow(`/v1/tasks/${id}/events?stream=true`, id, { state_change: load });
    return () => {
      current = false;
      stream.close();
    };
  }, [id]);
  if (error) return <Failure error={error.status === 404 ? new Error(`No task ${id} (or not yours).`) : error} />;
  if (!task) return <p class="muted">Loading…</p>;
  return (
    <section class="run">
      <div class="title">
        <h1 class="mono">{task.id}</h1>
        <StateBadge task={task} />
      </div>
      <p class="muted">
        {task.agent.profile} · {task.agent.model} · created <Ago iso={task.created_at} />
        {task.started_at && <> · ran <Duration task={task} /></>}
      </p>
      <h2>Input</h2>
      <Content value={task.input} />
      {TERMINAL.has(task.state) && task.result !== null && task.result !== undefined && (
        <>
          <h2>Result</h2>
          <Content value={task.result} />
        </>
      )}
    </section>
  );
}
