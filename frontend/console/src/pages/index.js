// Every page of the console: `path` is the route's first part, `nav` its entry in
// the navigation (none: reached by links only), `view` the component, given the route.
import { Runs } from "./runs.jsx";

export const PAGES = [
  { path: "runs", nav: "Runs", view: Runs },
];
