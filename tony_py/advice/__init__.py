"""Tuning advice from a job's own measurements (`tony advise`): what the TonY paper promised and
Dr. Elephant's TonY heuristics began, with a suggested value for every finding.

facts.py gathers what a job asked for and what it used (from its history, or from the AM while
it runs) into one JobFacts; heuristics (resources.py, timing.py, failures.py) turn it into
Findings, each with its evidence in numbers and a change a user can paste; thresholds.py holds
every threshold with its reason; report.py ranks, prints and applies them. Pure: no I/O here.
"""
