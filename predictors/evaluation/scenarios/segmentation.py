"""Semantic segmentation: the scenario of `semantic_segmentation` models, scored per pixel.

The loop is `FixedBatches`' (staged batches timed back to back, warm-up, repetitions, spans);
the model's one output holds a score per class and pixel, its class axis where the output's
`layout` says (NCHW: (N, classes, H, W); NHWC: (N, H, W, classes)); or the manifest's custom
postprocess code computes those scores from every output the model has, as its
`postprocess_outputs` declare them. Each image's predicted
classes (the best score per pixel) are brought back to the image's own pixels: scaled to the
model input's size where the output is smaller, the padding cut off, and resized to the image
(nearest neighbour), through `ImagePreprocessor.to_image`.

Pixels whose mask value is the dataset's `ignore_label` count for no class. The rest fill a
confusion matrix (scikit-learn's `confusion_matrix`, summed batch by batch, so that no
dataset is held whole), from which come, per class, IoU = TP / (TP + FP + FN), and:
`miou` (the mean IoU over the classes that occur in the masks or the predictions), `pixel_accuracy`
and `mean_class_accuracy`. `top1` is `miou` and `top5` is `pixel_accuracy` (the result's two
accuracy columns, labelled by task where they are shown).
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from PIL import Image

from predictors.data import MaskReader
from predictors.evaluation.base import FirstPass, Staged
from predictors.evaluation.errors import EvaluationError
from predictors.evaluation.scenario import register
from predictors.evaluation.scenarios.fixed_batches import PerImage
from predictors.processing import ProcessingError
from predictors.processing.custom_code import custom_returns
from predictors.tasks import data_input_name, decoded_outputs, scored_output_name


def confusion(truth: np.ndarray, predicted: np.ndarray, classes: int) -> np.ndarray:
    """scikit-learn's confusion matrix of two class maps, (classes, classes): rows the truth."""
    from sklearn.metrics import confusion_matrix

    return np.asarray(
        confusion_matrix(truth.ravel(), predicted.ravel(), labels=list(range(classes))),
        dtype=np.int64,
    )


def segmentation_metrics(matrix: np.ndarray, images: int, labels: list[str]) -> dict[str, Any]:
    """mIoU, pixel accuracy and mean class accuracy of a summed confusion matrix."""
    true_positive = np.diag(matrix).astype(np.float64)
    truth = matrix.sum(axis=1).astype(np.float64)
    predicted = matrix.sum(axis=0).astype(np.float64)
    union = truth + predicted - true_positive
    seen = union > 0
    iou = np.divide(true_positive, union, out=np.zeros_like(union), where=seen)
    present = truth > 0
    recall = np.divide(true_positive, truth, out=np.zeros_like(truth), where=present)
    pixels = float(matrix.sum())
    miou = float(iou[seen].mean()) if seen.any() else 0.0
    pixel_accuracy = float(true_positive.sum() / pixels) if pixels else 0.0
    return {
        "top1": miou,
        "top5": pixel_accuracy,
        "count": images,
        "miou": miou,
        "pixel_accuracy": pixel_accuracy,
        "mean_class_accuracy": float(recall[present].mean()) if present.any() else 0.0,
        "iou": {label: float(iou[i]) if seen[i] else None for i, label in enumerate(labels)},
        "pixels": int(pixels),
        "library": "scikit-learn confusion_matrix",
    }


@register("segmentation", tasks=("semantic_segmentation",))
class Segmentation(PerImage):
    """The segmentation scenario; see the module docstring."""

    reader_type = MaskReader

    def configure(self) -> None:
        super().configure()
        self.ignore_label: int | None = self.setup.dataset.data.get("ignore_label")
        self.layout = str(self.spec.output_parameters.get("layout"))
        # Custom postprocess code takes the model's outputs (by name where it has several)
        # and returns the per-pixel scores (`decoded_outputs`), whose layout is read above.
        self.returns: list[str] = []
        code = self.custom_postprocess
        if code is not None:
            self.returns = [str(entry["name"]) for entry in decoded_outputs(self.model.data)]
            feed, run = data_input_name(self.model.data), self.predictor.run
            names = list(code.outputs) or [scored_output_name(self.model.data)]
            self.call = lambda batch: run({feed: batch}, names)

    def output_type(self) -> str:
        return "class_shares"

    def start_collecting(self) -> None:
        classes = len(self.labels)
        self._matrix = np.zeros((classes, classes), np.int64)
        self._shares: list[np.ndarray] = []
        self._images = 0

    def collect(self, stage: Staged, stage_outputs: list[Any]) -> None:
        classes = len(self.labels)
        for batch, masks, images, outputs in zip(
            stage.batches, stage.labels, stage.images, stage_outputs, strict=True
        ):
            if self.returns:
                code = self.custom_postprocess
                assert code is not None
                given = outputs if code.outputs else outputs[0]
                [returned] = custom_returns(code, given, len(images), self.returns).values()
                shapes = sorted({array.shape for array in returned})
                if len(shapes) != 1:
                    raise EvaluationError(
                        f"{self.model.name}'s custom postprocess code returned scores of "
                        f"different shapes in one batch ({', '.join(map(str, shapes))}); the "
                        "images of a batch share the model input's size"
                    )
                outputs = np.stack(returned)
            scores = np.asarray(outputs)
            what = (
                f"what {self.model.name}'s custom postprocess code returned"
                if self.returns
                else f"{self.model.name}'s output"
            )
            if scores.ndim != 4:
                raise EvaluationError(
                    f"{what} has shape {scores.shape}; a "
                    f"semantic_segmentation output is (N, classes, H, W) or (N, H, W, classes)"
                )
            if self.layout == "NHWC":
                scores = scores.transpose(0, 3, 1, 2)
            if scores.shape[1] != classes:
                raise EvaluationError(
                    f"{what} has {scores.shape[1]} classes on its class "
                    f"axis ({self.layout}) for {classes} labels"
                )
            if not np.all(np.isfinite(scores)):
                raise EvaluationError(f"{what} is not finite (NaN or inf)")
            predicted = scores.argmax(axis=1).astype(np.int32)
            nchw = self.preprocessor.layout == "NCHW"
            input_h, input_w = batch.shape[2:4] if nchw else batch.shape[1:3]
            for index, (encoded, mask) in enumerate(zip(images, masks, strict=True)):
                labels = self._to_image(predicted[index], encoded, (input_h, input_w), mask.shape)
                valid = mask != self.ignore_label if self.ignore_label is not None else None
                truth = mask if valid is None else mask[valid]
                guess = labels if valid is None else labels[valid]
                if truth.size and int(truth.max()) >= classes:
                    raise EvaluationError(
                        f"a mask has class {int(truth.max())}, but {self.model.name} reads "
                        f"{classes} labels"
                    )
                if truth.size:  # a mask all of the ignore label scores nothing
                    self._matrix += confusion(truth, guess, classes)
                self._shares.append(np.bincount(labels.ravel(), minlength=classes) / labels.size)
                self._images += 1

    def _to_image(
        self,
        predicted: np.ndarray,
        encoded: bytes,
        input_size: tuple[int, int],
        image_size: tuple[int, ...],
    ) -> np.ndarray:
        """A class map of the model's output, in the image's own pixels."""
        try:
            scale_x, scale_y, left, top = self.preprocessor.to_image(encoded)
        except ProcessingError as error:
            raise EvaluationError(str(error)) from error
        height, width = int(image_size[0]), int(image_size[1])
        with Image.open(io.BytesIO(encoded)) as image:
            if image.size != (width, height):
                raise EvaluationError(
                    f"a mask is {height}x{width}, but its image is {image.size[1]}x"
                    f"{image.size[0]}: a mask has its image's size"
                )
        classes = Image.fromarray(predicted)
        if predicted.shape != input_size:
            classes = classes.resize((input_size[1], input_size[0]), Image.Resampling.NEAREST)
        resized_w, resized_h = round(width / scale_x), round(height / scale_y)
        # The image's place in the input (a padding to a square first leaves it off the grid).
        left, top = round(left), round(top)
        classes = classes.crop((left, top, left + resized_w, top + resized_h))
        if (resized_h, resized_w) != (height, width):
            classes = classes.resize((width, height), Image.Resampling.NEAREST)
        return np.asarray(classes)

    def score(self) -> tuple[dict[str, Any], int]:
        accuracy = segmentation_metrics(self._matrix, self._images, self.labels)
        if self.first is None:
            shares = np.stack(self._shares).astype(np.float32)
            order = np.argsort(-shares, axis=1, kind="stable")
            top = min(
                int(self.spec.output_parameters.get("top_k", len(self.labels))), len(self.labels)
            )
            predictions = [
                [(int(c), self.labels[int(c)], float(row[c])) for c in ranked[:top] if row[c] > 0]
                for row, ranked in zip(shares, order, strict=True)
            ]
            self.first = FirstPass.unlabelled(shares, predictions)
        return accuracy, self._images
