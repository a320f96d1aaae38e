// Schedules: the tenant's recurring tasks (cron in a time zone, the next slots, the
// task each starts), one created from a form (the task's fields as a new task's),
// enabled or disabled, and deleted, each change asked first; the API's errors shown
// in its words.

import "./tenant.css";
import { useState } from "preact/hooks";
import { api, query } from "../api.js";
import { Ago, ConfirmButton, Empty, Failure, dateTime, short, useAction, useLoad, shortId } from "../ui.jsx";
import { FormError, TaskFields, template } from "./new.jsx";

const MISSED = {
  latest: "latest (one task for the last)",
  all: "all (one task per slot)",
  skip: "skip (none)",
};
const ZONES = typeof Intl.supportedValuesOf === "function" ? Intl.supportedValuesOf("timeZone") : [];
const HERE = Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";

// A moment in the schedule's own time zone (as its cron reads), e.g. "Mon 1 Dec, 03:00".
function inZone(iso, timeZone) {
  try {
    return new Date(iso).toLocaleString(undefined, {
      timeZone, weekday: "short", day: "numeric", month: "short", hour: "2-digit", minute: "2-digit",
    });
  } catch {
    return dateTime(iso);
  }
}

export function Schedules() {
  const [cursor, setCursor] = useState(null);
  const list = useLoad(() => api.get(`/v1/schedules${query({ cursor, limit: 100 })}`), [cursor]);
  const agents = useLoad(() => api.get("/v1/agents"), []);
  const schedules = list.data ? list.data.schedules : [];
  return (
    <section class="schedules">
      <div class="title">
        <h1>Schedules</h1>
      </div>
      <Failure error={list.error || agents.error} />
      {schedules.length > 0 && <ScheduleTable schedules={schedules} changed={list.reload} />}
      {!list.loading && !list.error && schedules.length === 0 && <Empty>No schedule yet.</Empty>}
      <div class="pages">
        {cursor && <button type="button" onClick={() => setCursor(null)}>Newest</button>}
        {list.data && list.data.next_cursor && (
          <button type="button" onClick={() => setCursor(list.data.next_cursor)}>Older</button>
        )}
      </div>
      <section class="card create">
        <h2>New schedule</h2>
        <CreateForm agents={agents.data ? agents.data.agents : null} created={list.reload} />
      </section>
    </section>
  );
}

function CreateForm({ agents, created }) {
  const { busy, error, setError, run } = useAction();
  const [form, setForm] = useState(0); // a new key: an empty form again
  async function submit(event) {
    event.preventDefault();
    const fields = event.currentTarget.elements;
    setError(null);
    let body;
    try {
      body = {
        cron: fields.cron.value.trim(),
        timezone: fields.timezone.value.trim() || "UTC",
        missed: fields.missed.value,
        enabled: fields.enabled.checked,
        task: template(event.currentTarget),
      };
      if (fields.name.value.trim()) body.name = fields.name.value.trim();
    } catch (failure) {
      setError(failure);
      return;
    }
    await run(async () => {
      await api.post("/v1/schedules", body);
      setForm((n) => n + 1);
      created();
    });
  }
  if (!agents) return <p class="muted">Loading…</p>;
  return (
    <form class="tenant-form" id="new-schedule" key={form} onSubmit={submit}>
      <label>
        name (optional, unique)
        <input name="name" maxLength={200} autocomplete="off" />
      </label>
      <label>
        cron
        <input name="cron" required placeholder="0 9 * * MON-FRI" autocomplete="off" spellcheck={false} />
        <span class="hint">minute hour day month weekday (or seconds first)</span>
      </label>
      <label>
        time zone
        <input name="timezone" list="zones" defaultValue={HERE} autocomplete="off" spellcheck={false} />
        <datalist id="zones">{ZONES.map((zone) => <option value={zone} />)}</datalist>
      </label>
      <label>
        slots missed while down
        <select name="missed">
          {Object.entries(MISSED).map(([value, label]) => <option value={value}>{label}</option>)}
        </select>
      </label>
      <label class="check">
        <input type="checkbox" name="enabled" defaultChecked />
        enabled
      </label>
      <fieldset>
        <legend>the task each slot starts</legend>
        <TaskFields agents={agents} />
      </fieldset>
      <FormError error={error} />
      <div class="actions">
        <button type="submit" class="primary" disabled={busy}>Create schedule</button>
      </div>
    </form>
  );
}

function ScheduleTable({ schedules, changed }) {
  return (
    <div class="table-scroll">
      <table id="schedules">
        <thead>
          <tr>
            <th>name</th><th>cron</th><th>time zone</th><th>next runs</th><th>enabled</th>
            <th>task</th><th>last task</th><th />
          </tr>
        </thead>
        <tbody>
          {schedules.map((schedule) => <Row schedule={schedule} changed={changed} key={schedule.id} />)}
        </tbody>
      </table>
    </div>
  );
}

function Row({ schedule, changed }) {
  const label = schedule.name || shortId(schedule.id);
  const toggle = async () => {
    await api.patch(`/v1/schedules/${schedule.id}`, { enabled: !schedule.enabled });
    changed();
  };
  const remove = async () => {
    await api.delete(`/v1/schedules/${schedule.id}`);
    changed();
  };
  const task = schedule.task || {};
  return (
    <tr data-schedule={schedule.id}>
      <td class="name">{schedule.name || <span class="muted mono" title={schedule.id}>{shortId(schedule.id)}</span>}</td>
      <td>
        <code>{schedule.cron}</code>
        <span class="describe">{schedule.description}</span>
      </td>
      <td>{schedule.timezone}</td>
      <td class="next-runs">
        {schedule.next_runs.length ? (
          <ol class="next">
            {schedule.next_runs.slice(0, 3).map((at) => (
              <li><time dateTime={at} title={`${dateTime(at)} here`}>{inZone(at, schedule.timezone)}</time></li>
            ))}
          </ol>
        ) : <span class="muted">none while disabled</span>}
      </td>
      <td class="enabled">{schedule.enabled ? <span class="on">enabled</span> : <span class="off">disabled</span>}</td>
      <td class="task">
        <span class="muted">{task.agent || "default"}</span> <span class="clip">{short(task.input, 80)}</span>
      </td>
      <td class="last">
        {schedule.last_task_id ? (
          <>
            <a class="mono" href={`#/runs/${schedule.last_task_id}`}>{shortId(schedule.last_task_id)}</a>{" "}
            <Ago iso={schedule.last_slot} />
          </>
        ) : <span class="muted">none yet</span>}
        {schedule.last_error && (
          <span class="error describe" title={JSON.stringify(schedule.last_error)}>
            {schedule.last_error.detail || schedule.last_error.title || "its last slot started no task"}
          </span>
        )}
      </td>
      <td class="actions">
        <ConfirmButton
          label={schedule.enabled ? "Disable" : "Enable"}
          title={`${schedule.enabled ? "Disable" : "Enable"} ${label}?`}
          detail={schedule.enabled
            ? "No task starts from it until it is enabled again."
            : "It starts a task at its next slot after now (slots passed while disabled are not made up)."}
          onConfirm={toggle}
        />
        <ConfirmButton
          label="Delete"
          danger
          title={`Delete ${label}?`}
          detail="The schedule goes; the tasks it started stay."
          onConfirm={remove}
        />
      </td>
    </tr>
  );
}
