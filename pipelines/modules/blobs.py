"""The minimal module file: three Gaussian blobs, a categorical hint, missing values (the end-to-end tests' data).

It follows the same convention as pipelines/modules/taxi.py and shows the minimum a module needs; copy it to start
your own (`slipway.pipelines.modules.module_path("blobs.py")` finds it in an installed package).
"""

import tensorflow as tf
import tensorflow_transform as tft

LABEL = "species"
NUMERIC = ["x1", "x2"]
CATEGORICAL = ["color"]


def _dense(tensor, default):
    """Features that may be missing arrive as SparseTensor: fill the gaps, return a [batch] dense tensor."""
    if isinstance(tensor, tf.sparse.SparseTensor):
        tensor = tf.sparse.to_dense(
            tf.SparseTensor(tensor.indices, tensor.values, [tensor.dense_shape[0], 1]), default_value=default
        )
    return tf.reshape(tensor, [-1])


def preprocessing_fn(inputs):
    outputs = {name: tft.scale_to_z_score(_dense(inputs[name], 0.0)) for name in NUMERIC}
    for name in CATEGORICAL:
        values = _dense(inputs[name], "")
        outputs[name] = tft.compute_and_apply_vocabulary(values, num_oov_buckets=1, vocab_filename=name)
    outputs[LABEL] = inputs[LABEL]
    return outputs


def hyperparameters():
    return {"epochs": 8, "batch_size": 32, "learning_rate": 0.02}


def build_keras_model(hparams, tf_transform_output, label_key, num_classes):
    inputs = {name: tf.keras.Input(shape=(), name=name) for name in NUMERIC}
    inputs.update({name: tf.keras.Input(shape=(), name=name, dtype=tf.int64) for name in CATEGORICAL})
    size = tf_transform_output.vocabulary_size_by_name("color") + 1
    parts = [tf.keras.layers.Reshape((1,))(inputs[name]) for name in NUMERIC]
    parts.append(tf.keras.layers.CategoryEncoding(num_tokens=size, output_mode="one_hot")(inputs["color"]))
    hidden = tf.keras.layers.Dense(16, activation="relu")(tf.keras.layers.Concatenate()(parts))
    if num_classes == 2:
        output, loss = tf.keras.layers.Dense(1, activation="sigmoid")(hidden), "binary_crossentropy"
    else:
        output = tf.keras.layers.Dense(num_classes, activation="softmax")(hidden)
        loss = "sparse_categorical_crossentropy"
    model = tf.keras.Model(inputs=inputs, outputs=output)
    model.compile(optimizer=tf.keras.optimizers.Adam(hparams["learning_rate"]), loss=loss, metrics=["accuracy"])
    return model


def eval_settings():
    return {
        "slices": [["color"]],
        "thresholds": {"sparse_categorical_accuracy": {"lower_bound": 0.8}},
    }
