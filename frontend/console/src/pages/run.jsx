// One run, as an operator reads it: who and where it is, what can be done to it, its
// conversation (the answer streaming in), its time to scale, its subtasks, webhook
// deliveries and raw event log, all kept live from its event stream.

import "./run.css";
import { Failure } from "../ui.jsx";
import { Conversation } from "./run/conversation.jsx";
import { RunControls } from "./run/controls.jsx";
import { RunHead, RunIO } from "./run/head.jsx";
import { useRun } from "./run/live.js";
import { Deliveries, EventLog, Forks, Subtasks } from "./run/related.jsx";
import { Calls, Timeline } from "./run/timeline.jsx";

export function Run({ id }) {
  const run = useRun(id);
  const { task, error } = run;
  if (error) {
    const missing = [400, 404, 422].includes(error.status);
    return (
      <section class="run">
        <Failure error={missing ? new Error(`No task ${id}`) : error} />
        {missing && <p class="muted">It does not exist, or it is not yours. <a href="#/runs">All runs</a></p>}
      </section>
    );
  }
  if (!task) return <p class="muted">Loading…</p>;
  const { loadDeliveries, deliveriesSoon } = run.loaders.current;
  return (
    <section class="run">
      <RunHead task={task} progress={run.progress} messages={run.messages} />
      <RunControls task={task} messages={run.messages} onTask={(fresh) => fresh && run.setTask(fresh)} />
      <div class="run-columns">
        <div class="run-main">
          <RunIO task={task} />
          <Conversation task={task} messages={run.messages} writing={run.writing} calls={run.calls} />
        </div>
        <div class="run-side">
          <Timeline task={task} events={run.events} messages={run.messages} calls={run.calls} />
          <Calls calls={run.calls} />
          <Subtasks tree={run.subtasks} />
          <Forks task={task} />
          <Deliveries deliveries={run.deliveries} urls={run.urls} onRedeliver={() => (deliveriesSoon || loadDeliveries)()} />
        </div>
      </div>
      <EventLog events={run.events} />
    </section>
  );
}
