"""Trace-driven simulator and capacity planner for same-DC PD, cross-DC PD and PDD.

Pure Python (simpy, PyYAML; matplotlib for plots): nothing here imports SGLang.
"""
