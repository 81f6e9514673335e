"""Module file for image classification (the digits sample, CIFAR-10 batches, or your own class folders).

Ingest writes each image as raw uint8 pixels (`image`, row-major height x width x channels) and records the
shape in the examples' metadata; transform hands that to preprocessing_fn as custom_config["image_shape"]
(the TFX custom_config convention), so this one module serves 8x8 grey digits and 32x32 colour CIFAR-10 alike.
"""

import tensorflow as tf

IMAGE = "image"
PIXELS = "pixels"


def preprocessing_fn(inputs, custom_config):
    height, width, channels = custom_config["image_shape"]
    label = custom_config["label"]
    pixels = tf.io.decode_raw(tf.reshape(inputs[IMAGE], [-1]), tf.uint8)
    # Scaled to [0, 1] inside the TFT graph, so serving gets exactly what training saw.
    image = tf.reshape(tf.cast(pixels, tf.float32) / 255.0, [-1, height * width * channels])
    return {PIXELS: image, label: inputs[label]}


def hyperparameters():
    return {"epochs": 8, "batch_size": 32, "learning_rate": 0.002, "filters": 32, "warmup_epochs": 1}


def build_keras_model(hparams, tf_transform_output, label_key, num_classes):
    size = tf_transform_output.transformed_feature_spec()[PIXELS].shape[-1]
    side, channels = _square_side_and_channels(size)
    pixels = tf.keras.Input(shape=(size,), name=PIXELS)
    x = tf.keras.layers.Reshape((side, side, channels))(pixels)
    x = tf.keras.layers.Conv2D(hparams["filters"], 3, padding="same", activation="relu")(x)
    x = tf.keras.layers.Conv2D(hparams["filters"], 3, padding="same", activation="relu")(x)
    x = tf.keras.layers.MaxPooling2D()(x)
    x = tf.keras.layers.Conv2D(hparams["filters"] * 2, 3, padding="same", activation="relu")(x)
    x = tf.keras.layers.GlobalAveragePooling2D()(x)
    x = tf.keras.layers.Dropout(0.2)(x)
    if num_classes == 2:
        output, loss = tf.keras.layers.Dense(1, activation="sigmoid")(x), "binary_crossentropy"
    else:
        output = tf.keras.layers.Dense(num_classes, activation="softmax")(x)
        loss = "sparse_categorical_crossentropy"
    model = tf.keras.Model(inputs={PIXELS: pixels}, outputs=output)
    model.compile(optimizer=tf.keras.optimizers.Adam(hparams["learning_rate"]), loss=loss, metrics=["accuracy"])
    return model


def _square_side_and_channels(size: int) -> tuple[int, int]:
    """Images are square here (8x8 digits, 32x32 CIFAR): recover the side and channels from the flat size."""
    for channels in (1, 3):
        side = round((size / channels) ** 0.5)
        if side * side * channels == size:
            return side, channels
    raise ValueError(f"pixels of size {size} are not a square image with 1 or 3 channels")


def eval_settings():
    return {"thresholds": {"sparse_categorical_accuracy": {"lower_bound": 0.85}}}
