"""Reading tabular data: CSV shapes and text checks, streaming CSV and Parquet readers, TFRecords, tf.Example values,
finding input files - shared by ingest and the components that read new data to predict on (batch_predict).

`csv_shape` checks a CSV file's compression, delimiter and header before it is read, `csv_text` its text (one-line
errors with a line number) and holds the limits on a row, `csv_stream` and `parquet` read the files in bounded
batches, `columns` says how a column of an arrow type is written, `examples` turns columns into Python values and
tf.Examples, `tfrecords` reads TFRecord files and their tf.Examples, `files` finds the input files and their format.
"""
