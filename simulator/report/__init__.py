"""Reading results: what the dashboard and notebooks show, studies (sweeps, knees), profile and
fidelity reports. Pure numpy/pandas, no plotting."""
