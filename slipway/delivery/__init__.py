"""Delivery to Kubeflow Pipelines through kfp.Client: upload compiled pipelines as versions, submit runs, schedule
recurring runs (`slipway upload | submit | schedule | schedules | unschedule`)."""
