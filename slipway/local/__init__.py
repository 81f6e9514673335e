"""A pipeline run on this machine (`slipway run`): kfp.local drives the compiled pipeline, each step a process of
this environment (runner) or a container of its component's image (containers), shown one line per step (console)."""
