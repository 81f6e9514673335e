"""Slipway's KFP components, for composing your own pipelines:

    from slipway.components import IngestOp, ValidateOp, TransformOp, TrainOp, EvaluateOp

Each is a lightweight KFP component on the Slipway runtime image; the same components are compiled to
components/<name>/component.yaml for kfp.components.load_component_from_file. (The names carry an Op suffix,
as in Google Cloud Pipeline Components, because slipway.components.<name> is the component's package.)
"""

from slipway.components.evaluate.component import evaluate as EvaluateOp
from slipway.components.ingest.component import ingest as IngestOp
from slipway.components.train.component import train as TrainOp
from slipway.components.transform.component import transform as TransformOp
from slipway.components.validate.component import validate as ValidateOp

__all__ = ["IngestOp", "ValidateOp", "TransformOp", "TrainOp", "EvaluateOp"]
