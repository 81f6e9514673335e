"""The deploy component: push a blessed model in TF Serving's layout and serve it (locally or with KServe)."""
