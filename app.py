"""llmplan dashboard: ``streamlit run app.py`` (or ``make run``).

Thin pages over the ``simulator`` package: the pages read widgets, call library functions
(``simulator.simulate``, ``simulator.report.analysis``) and render plotly charts; no model logic here.
"""
import sys
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:   # the pages import app_pages.common and the local simulator package
    sys.path.insert(0, str(ROOT))

st.set_page_config(page_title="llmplan", page_icon=":material/speed:", layout="wide")

pages = [
    st.Page("app_pages/what_if.py", title="What-if", icon=":material/tune:", default=True),
    st.Page("app_pages/load_curve.py", title="Load curve", icon=":material/show_chart:"),
    st.Page("app_pages/capacity_plan.py", title="Capacity plan", icon=":material/public:"),
    st.Page("app_pages/hardware.py", title="Hardware profiles", icon=":material/memory:"),
    st.Page("app_pages/validation.py", title="Validation", icon=":material/fact_check:"),
]
page = st.navigation(pages)
st.sidebar.caption("llmplan: discrete-event simulation of LLM serving (vLLM-style batching, paged KV cache, "
                   "cost models over datasheet, imported and measured hardware profiles).")
page.run()
