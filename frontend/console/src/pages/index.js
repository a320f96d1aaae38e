// Every page of the console: `path` is the route's first part, `nav` its entry in
// the navigation (none: reached by links only), `view` the component, given the route.
import { Runs } from "./runs.jsx";
import { Overview } from "./overview.jsx";
import { Schedules } from "./schedules.jsx";
import { Spend } from "./spend.jsx";
import { NewTask } from "./new.jsx";
import { Webhooks } from "./webhooks.jsx";
import { Agents } from "./agents.jsx";
import { Keys } from "./keys.jsx";

export const PAGES = [
  { path: "runs", nav: "Runs", view: Runs },
  { path: "overview", nav: "Overview", view: Overview },
  { path: "spend", nav: "Spend", view: Spend },
  { path: "schedules", nav: "Schedules", view: Schedules },
  { path: "new", view: NewTask },
  { path: "webhooks", nav: "Webhooks", view: Webhooks },
  { path: "agents", nav: "Agents", view: Agents },
  { path: "keys", nav: "Keys", view: Keys },
];
