"""Self-contained HTML reports of stored runs: `eval --report` and `calibrate --report`.

Each report is one HTML5 file that loads nothing: an inline style sheet (the package's
`report.css`), charts as inline SVG, no script, no font or image by URL, and a
Content-Security-Policy that forbids fetching anything should a later edit try to. Every piece
of user and model text is escaped (see `_html`).
"""

from ._calibration import calibration_report
from ._eval import eval_report

__all__ = ["calibration_report", "eval_report"]
