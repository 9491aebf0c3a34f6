"""Charts for the comparison page and the PDF: one package, so the two never disagree.

Pure functions: plain lists/dicts in, an SVG document (str) out. Deterministic: matplotlib's Agg
stack with a fixed `svg.hashsalt`, no date in the metadata, and text kept as <text> elements
(`svg.fonttype = none`) so labels stay searchable and a CJK font can render them (the family list
prefers Noto Sans CJK and falls back to DejaVu Sans). When `simulated=True` the chart carries a
visible "SIMULATED" label and its title says so: simulator output is never shown unmarked.
matplotlib is loaded when the first chart is drawn (`canvas.mpl`), not when a page module imports a chart.

The rules every chart follows, in one place:

* **One colour per candidate.** `candidate_colours` gives each candidate a colour by its position
  in the selection; a page or a record passes that mapping (`colours`) to every chart it draws, so
  a candidate keeps its colour from chart to chart. A series the mapping does not name takes the
  next colour no candidate of the mapping uses. Reference lines (budgets, limits, the GPU's memory)
  are black or grey, never a candidate's colour.
* **No line through a single point.** A latency chart whose candidates were each measured at one
  load draws bars (one per candidate, the load in its label) instead of lines "against" a load
  that did not vary.
* **Units that fit the data.** Time axes are in seconds, minutes or hours by the span shown (a 15 s
  run in seconds, a 4 h soak in hours); token axes read 512, 1.5K, 128K, 1M, and ticks closer than
  the labels' width are thinned so they never overlap.
* **Nothing clipped.** Long tick and legend labels are wrapped (CJK by character), legends sit
  outside the plot, and the saved figure is cropped to everything drawn (`bbox_inches="tight"`).

Missing values (None or NaN) are drawn as gaps or "n/a", never as zero.

The modules, each imported by what it needs (this package imports none of them):

* `style`: the translator, the palette and the candidates' colours, units, label wrapping (no matplotlib);
* `canvas`: matplotlib on first use, figure, legend, SVG rendering, input checks, axes;
* `candidates`: the charts that compare candidates run by run;
* `phases`: the model switch, tenant isolation and swap-out charts;
* `traces`: an imported trace's length and arrival charts;
* `catalog`: every chart by name.
"""
