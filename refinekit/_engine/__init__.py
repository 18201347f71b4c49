"""The engine: flows and their drivers, jobs, budgets, events, policies, evaluators.

The sans-I/O attempt loop and its sync and async drivers, the job (its usage, budget scope and
reservations), prices, events and logging, the thread/loop bridge, outcomes, the judge-failure
policy, requests, the tool recorder and the evaluator protocol. No decorator, judge or model
SDK is imported here.
"""
