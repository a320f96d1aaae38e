// Charts drawn with uPlot in the page's colours (light or dark), the width of their
// card: the Chart component and the pieces its options are made of (axes, lines,
// stacked bars), for the overview and the spend view.

import uPlot from "uplot";
import { useEffect, useRef, useState } from "preact/hooks";

const HEIGHT = 190; // pixels
const DARK = "(prefers-color-scheme: dark)";

// The stylesheet's colours by name: `colour("completed")` is `var(--completed)`.
export function colour(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(`--${name}`).trim() || "#888";
}

function useScheme() {
  const [dark, setDark] = useState(() => matchMedia(DARK).matches);
  useEffect(() => {
    const scheme = matchMedia(DARK);
    const changed = () => setDark(scheme.matches);
    scheme.addEventListener("change", changed);
    return () => scheme.removeEventListener("change", changed);
  }, []);
  return dark;
}

// An axis in the page's colours; `label` names its unit.
export function axis(extra = {}) {
  return {
    stroke: colour("muted"),
    grid: { stroke: colour("line"), width: 1 },
    ticks: { stroke: colour("line"), width: 1 },
    font: "11px system-ui, sans-serif",
    labelFont: "11px system-ui, sans-serif",
    ...extra,
  };
}

// A line in a colour of the stylesheet.
export function line(label, name, extra = {}) {
  const stroke = colour(name);
  return { label, stroke, width: 2, points: { show: true, size: 5, fill: stroke }, ...extra };
}

export const COUNTS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000];
export const upFrom0 = (_u, _min, max) => [0, Math.max(1, max || 0) * 1.15];
export const shown = (format) => (_u, value) => (value === null || value === undefined ? "–" : format(value));

// A uPlot chart that fills its card's width and follows it as the window resizes, in
// the page's colours (light or dark). `options()`: uPlot's options but the size (read
// once: a chart of other series is another Chart, by its key); `data`: uPlot's
// columns, the first the times in seconds; `height` in pixels. Each axis's tick
// labels, drawn on the canvas, are also written on its element (`data-ticks`).
export function Chart({ options, data, label, height = HEIGHT }) {
  const box = useRef(null);
  const plot = useRef(null);
  const dark = useScheme();
  useEffect(() => {
    const element = box.current;
    const made = options();
    const record = (u) => {
      const divs = u.root.querySelectorAll(".u-axis");
      u.axes.forEach((one, i) => {
        if (!divs[i]) return;
        divs[i].dataset.axis = one.scale === "x" ? "x" : "y";
        divs[i].dataset.ticks = (one._values || []).filter((v) => v !== null && v !== "").join(" | ");
      });
    };
    const u = new uPlot(
      { ...made, width: Math.max(100, element.clientWidth), height, hooks: { draw: [record] } },
      data,
      element,
    );
    plot.current = u;
    const resized = new ResizeObserver(() => {
      const width = element.clientWidth;
      if (width && Math.abs(width - u.width) > 1) u.setSize({ width, height });
    });
    resized.observe(element);
    return () => {
      resized.disconnect();
      u.destroy();
      plot.current = null;
    };
  }, [dark]);
  useEffect(() => {
    if (plot.current) plot.current.setData(data);
  }, [data]);
  return <div class="chart" ref={box} role="img" aria-label={label} />;
}

// A bar of a stacked bar chart: uPlot paints series in order, so each series' column
// is the sum of its own and those under it (`stack`), and the tallest comes first;
// `value(i)` is what the legend says of point i (the series' own figure).
export function bar(label, fill, value) {
  return {
    label,
    stroke: fill,
    fill,
    width: 0,
    points: { show: false },
    paths: uPlot.paths.bars({ size: [0.7, 40] }),
    value: (_u, shownValue, _series, i) => (shownValue === null || i === null || i === undefined ? "–" : value(i)),
  };
}

// Columns of a stacked bar chart from each series' own (bottom first; a null counts
// as nothing): what the `bar`s draw, the tallest (the sum of all) first.
export function stack(columns) {
  const sums = [];
  let under = null;
  for (const column of columns) {
    under = column.map((v, i) => (under ? under[i] : 0) + (v ?? 0));
    sums.push(under);
  }
  return sums.reverse();
}
