"""TFDV statistics and their comparison: options, generators over record batches, drift/skew thresholds and
comparators, anomalies as rows - shared by validate and the components that check new data against a model's
training data.

`thresholds` parses the {feature: threshold} parameters, `generators` computes and settles the statistics,
`comparators` puts the skew and drift comparators on a schema and turns TFDV's Anomalies into rows.
"""
