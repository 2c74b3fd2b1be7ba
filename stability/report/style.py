"""The stylesheet every HTML page of the harness embeds inline (`stability.report.html`'s report,
the sweep's and the zoo's pages): one look, no external CSS, so a page opens anywhere.
"""

__all__ = ["CSS"]

CSS = """
:root { --ok: #1a7f37; --bad: #cf222e; --bad-bg: #ffebe9; --muted: #57606a; --line: #d0d7de; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; color: #1f2328;
       margin: 0 auto; padding: 20px 28px 60px; max-width: 1400px; background: #fff; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 0 0 6px; }
h3 { font-size: 15px; margin: 16px 0 6px; }
code, .mono { font: 12.5px/1.4 ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; }
.summary { font-size: 15px; padding: 8px 12px; border-radius: 6px; margin: 10px 0 4px; }
.summary.ok { background: #dafbe1; color: #116329; }
.summary.failed { background: var(--bad-bg); color: #82071e; font-weight: 600; }
.meta { color: var(--muted); margin: 0 0 14px; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 3px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { background: #f6f8fa; font-weight: 600; white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.mark { text-align: center; font-size: 16px; width: 28px; }
.ok .mark, .mark.ok { color: var(--ok); }
.not_applicable .mark { color: var(--muted); }
.failed .mark, .mark.failed, .error .mark { color: var(--bad); font-weight: 700; }
tr.failed > td, tr.error > td { background: var(--bad-bg); }
tr.failed > td.inv, tr.error > td.inv, table.cases tr.failed > td:first-child { box-shadow: inset 4px 0 0 var(--bad); }
td.spec-name { background: #fff; font-weight: 600; border-right: 1px solid var(--line); }
td.spec-name.failed { background: var(--bad-bg); }
td.bound, td.inv { white-space: nowrap; }
tr.detail > td { border-bottom: 2px solid var(--bad); font-size: 13px; padding: 2px 8px 8px 36px; }
tr.detail code { display: inline-block; background: #fff; border: 1px solid #f5c2c0; border-radius: 4px;
                 padding: 1px 6px; margin: 2px 0; word-break: break-all; }
tr.deciding > td { background: #f6f8fa; font-weight: 600; }
.case { overflow-wrap: anywhere; }
a { color: #0969da; text-decoration: none; }
a:hover { text-decoration: underline; }
details > summary { cursor: pointer; color: var(--muted); white-space: nowrap; }
details code { word-break: break-all; }
section.spec { border: 1px solid var(--line); border-radius: 8px; padding: 14px 18px; margin: 22px 0; }
section.spec.failed { border-color: var(--bad); box-shadow: inset 5px 0 0 var(--bad); }
.family { display: inline-block; font-size: 12px; font-weight: 500; padding: 1px 8px; border-radius: 10px;
          background: #ddf4ff; color: #0550ae; vertical-align: middle; margin-left: 6px; }
.description { margin: 2px 0 6px; }
.facts { color: var(--muted); margin: 0 0 8px; }
.facts span + span::before { content: " · "; }
ul.messages { margin: 6px 0 10px; padding-left: 0; list-style: none; }
ul.messages li { margin: 3px 0; padding: 4px 8px; border-radius: 4px; }
ul.messages li.failed, ul.messages li.error { background: var(--bad-bg); }
ul.messages li .mark { font-weight: 700; margin-right: 4px; }
ul.messages li.ok .mark { color: var(--ok); }
ul.messages li.failed .mark, ul.messages li.error .mark { color: var(--bad); }
ul.messages li.suggest { margin-left: 18px; border-left: 3px solid var(--ok); }
ul.messages li.suggest pre { white-space: pre-wrap; font-size: 12px; }
.plots { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 12px; margin: 8px 0; }
.plots figure { margin: 0; }
.plots img { width: 100%; max-width: 680px; height: auto; border: 1px solid #eaeef2; border-radius: 4px; }
.plots figcaption { color: var(--muted); font-size: 12.5px; }
table.cases td, table.cases th { font-size: 12.5px; padding: 3px 6px; }
"""
