"""The hours in each period of a plan: calendar quarters from the forecast's quarter labels.

A quarter label names a calendar or fiscal quarter (``2027Q1``, ``2027-Q1``, ``Q1 2027``, ``CY27Q1``:
calendar; ``FY27Q1``, ``FY2027-Q1``, ``Q1 FY27``: fiscal). A fiscal year starts on the first of the plan's
``fiscal_year_start_month`` and is named by the calendar year it ends in (``fiscal_year_start_month: 7``:
FY27 runs from 2026-07-01 to 2027-06-30, FY27Q1 is July-September 2026). A quarter's hours are its days
x 24 (2,160 h for a 90-day quarter, 2,184, 2,208; leap years included). The plan's ``period_hours``
states the hours of a label outright; a label that names no quarter and has no stated hours gets the
average quarter, 365.25 x 24 / 4 = 2,191.5 h (``period_source: average``), which the worksheet says.
"""
from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from simulator.errors import ScenarioError

AVERAGE_QUARTER_HOURS = 365.25 * 24 / 4
"""Hours in the average quarter (a label that names no calendar quarter, and no stated hours)."""

_YEAR = r"(?P<{name}>\d{{4}}|\d{{2}})"
_SEP = r"[\s_\-/]*"
_PATTERNS = (
    re.compile(rf"^(?P<kind>FY|CY)?{_SEP}{_YEAR.format(name='year')}{_SEP}Q(?P<q>\d)$", re.IGNORECASE),
    re.compile(rf"^Q(?P<q>\d){_SEP}(?P<kind>FY|CY)?{_SEP}{_YEAR.format(name='year')}$", re.IGNORECASE),
)


@dataclass(frozen=True)
class Period:
    """One forecast quarter's span: ``start`` and ``end`` (the last day, inclusive) when the label names a
    calendar or fiscal quarter, and its hours."""

    label: str
    hours: float
    source: str
    """``calendar`` (from the label), ``stated`` (the plan's ``period_hours``) or ``average`` (2,191.5 h)."""
    start: dt.date | None = None
    end: dt.date | None = None

    def describe(self) -> str:
        if self.start is not None and self.end is not None:
            return f"{self.start.isoformat()} to {self.end.isoformat()}, {self.hours:,.0f} h"
        if self.source == "stated":
            return f"{self.hours:,.6g} h (stated in the plan's period_hours)"
        return (f"{self.hours:,.1f} h (the average quarter: the label names no calendar or fiscal quarter; "
                "state its hours in period_hours)")


def quarter_span(label: str, fiscal_year_start_month: int = 1) -> tuple[dt.date, dt.date] | None:
    """``(first day, last day)`` of the quarter a label names, or None when it names none.

    Raises:
        ScenarioError: a label shaped like a quarter whose number is not 1-4.
    """
    text = label.strip()
    for pattern in _PATTERNS:
        m = pattern.match(text)
        if m is None:
            continue
        q = int(m.group("q"))
        if not 1 <= q <= 4:
            raise ScenarioError(f"forecast quarter {label!r}", q, "a quarter number must be 1 to 4")
        year = int(m.group("year"))
        year += 2000 if year < 100 else 0
        fiscal = (m.group("kind") or "").upper() == "FY"
        month0 = fiscal_year_start_month if fiscal else 1
        # a fiscal year named by the calendar year it ends in: one starting in January is that year
        first_year = year - 1 if fiscal and month0 > 1 else year
        months = (month0 - 1) + 3 * (q - 1)
        start = dt.date(first_year + months // 12, months % 12 + 1, 1)
        after = months + 3
        end = dt.date(first_year + after // 12, after % 12 + 1, 1) - dt.timedelta(days=1)
        return start, end
    return None


def plan_periods(quarters: list[str], fiscal_year_start_month: int = 1,
                 stated: dict[str, float] | None = None) -> dict[str, Period]:
    """Each forecast quarter's :class:`Period`: the stated hours, else the labelled quarter's, else the
    average quarter's."""
    stated = stated or {}
    unknown = [k for k in stated if k not in quarters]
    if unknown:
        raise ScenarioError(f"period_hours.{unknown[0]}", stated[unknown[0]],
                            f"not a quarter of the forecast; quarters: {', '.join(quarters)}")
    out = {}
    for q in quarters:
        span = quarter_span(q, fiscal_year_start_month)
        if q in stated:
            out[q] = Period(q, float(stated[q]), "stated")
        elif span is not None:
            out[q] = Period(q, float(((span[1] - span[0]).days + 1) * 24), "calendar", *span)
        else:
            out[q] = Period(q, AVERAGE_QUARTER_HOURS, "average")
    return out
