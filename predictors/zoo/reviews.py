"""The zoo's text classifier and its dataset: whether a short product review is positive.

``short-reviews``: one-sentence reviews of products, made from a fixed seed out of openings,
products (some with accented names: "café grinder", "crème brûlée torch"), verdicts and
endings, labelled ``negative`` or ``positive``. A verdict may be negated ("is not great", "is
not awful"), so that single words do not decide; one label in twelve is flipped at random, so
that no model reaches 100 %. 1,200 rows to train on, 300 to validate; the column ``input``
holds each review's text (a string) and ``label`` its class.

``review-sentiment``: a word-level tokenizer (Hugging Face ``tokenizers``: BERT's normaliser,
lower-casing and stripping accents, and its pre-tokeniser; a vocabulary of the 69 words and
marks of the training reviews, any other word ``[UNK]``; ``[CLS] … [SEP]`` around each text,
padding ``[PAD]`` = 0) and a small network over its ids
(an embedding, a convolution over three neighbouring tokens, a max over the tokens that are not
padding, a linear layer to the two classes), trained on the training reviews and exported to
ONNX and TorchScript from the same weights. The evaluation loop tokenises each review with the
tokenizer file (`predictors.processing.text`), as the model was trained.

Files, as ``predictors.zoo.build`` writes them:

- ``datasets/short-reviews/1.0.0/{train,validation}.parquet``;
- ``models/review-sentiment/1.0.0/{review-sentiment.onnx,review-sentiment.pt,labels.txt,
  tokenizer.json}``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

DATASET = "short-reviews"
MODEL = "review-sentiment"
LABELS = ("negative", "positive")
SEED = 20261128
SPLITS = {"train": 1200, "validation": 300}
# Every review becomes this many token ids (the manifest's max_length).
MAX_LENGTH = 24
SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")  # ids 0 to 3, in this order
PAD, UNKNOWN = SPECIAL[:2]
FLIPPED = 1 / 12

OPENINGS = ("", "honestly, ", "after a week, ", "so far ", "overall ", "well, ", "to be fair, ")
PRODUCTS = (
    "the kettle",
    "this blender",
    "the café grinder",
    "my new headphones",
    "the crème brûlée torch",
    "this phone case",
    "the desk lamp",
    "the naïve-art poster",
    "this backpack",
    "the garden hose",
    "the smart watch",
    "this frying pan",
)
GOOD = ("great", "excellent", "sturdy", "lovely", "reliable", "worth it", "a joy", "superb")
BAD = ("awful", "flimsy", "useless", "broken", "a waste", "disappointing", "noisy", "terrible")
ENDINGS = ("", ".", "!", " and i would buy it again", " — would not recommend", ", five stars")


def _review(rng: np.random.Generator) -> tuple[str, int]:
    """A review and its true class (before any flip)."""
    positive = bool(rng.integers(2))
    negated = rng.random() < 0.3
    # A negated verdict says the opposite of its word: "not awful" is positive.
    words = BAD if positive == negated else GOOD
    verdict = ("is not " if negated else "is ") + str(words[rng.integers(len(words))])
    ending = ENDINGS[rng.integers(len(ENDINGS))]
    if ("again" in ending or "five" in ending) and not positive:
        ending = "."
    if "recommend" in ending and positive:
        ending = "!"
    text = OPENINGS[rng.integers(len(OPENINGS))] + PRODUCTS[rng.integers(len(PRODUCTS))]
    return f"{text} {verdict}{ending}", int(positive)


def make_splits() -> dict[str, tuple[list[str], np.ndarray]]:
    """{split: (texts, labels)}, labels int64 with one in twelve flipped."""
    rng = np.random.default_rng(SEED)
    splits = {}
    for split, count in SPLITS.items():
        rows = [_review(rng) for _ in range(count)]
        labels = np.array([label for _, label in rows], np.int64)
        flips = rng.random(count) < FLIPPED
        labels[flips] = 1 - labels[flips]
        splits[split] = ([text for text, _ in rows], labels)
    return splits


def build_dataset(store: str) -> dict:
    import pyarrow as pa

    from predictors.zoo.common import build_generated

    splits = make_splits()

    def columns(split: str) -> list[Any]:
        texts, labels = splits[split]
        return [("input", texts, pa.string()), ("label", labels, pa.int64())]

    return build_generated(store, DATASET, LABELS, "text", columns, SPLITS)


# --- the tokenizer and the model --------------------------------------------------------------


def make_tokenizer(texts: list[str]) -> Any:
    """A word-level tokenizer learnt from `texts` (see the module docstring). Its vocabulary is
    every word and mark of the texts, ordered by count and then by the word: the same for the
    same texts (a WordPiece trainer's merges of equal counts are not)."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordLevel
    from tokenizers.trainers import WordLevelTrainer

    tokenizer = Tokenizer(WordLevel(unk_token=UNKNOWN))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = WordLevelTrainer(special_tokens=list(SPECIAL), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        special_tokens=[(token, tokenizer.token_to_id(token)) for token in ("[CLS]", "[SEP]")],
    )
    tokenizer.enable_padding(pad_id=0, pad_token=PAD)
    return tokenizer


def encode(tokenizer: Any, texts: list[str]) -> np.ndarray:
    """`texts` as rows of MAX_LENGTH ids, as the tokenizer truncates and pads them."""
    tokenizer.enable_truncation(max_length=MAX_LENGTH)
    tokenizer.enable_padding(pad_id=0, pad_token=PAD, length=MAX_LENGTH)
    return np.array([e.ids for e in tokenizer.encode_batch(texts)], np.int64)


def _module(vocabulary: int):  # type: ignore[no-untyped-def]
    import torch
    from torch import nn

    class ReviewSentiment(nn.Module):
        """(N, T) token ids, 0 the padding -> (N, 2) logits."""

        def __init__(self) -> None:
            super().__init__()
            self.embedding = nn.Embedding(vocabulary, 24, padding_idx=0)
            self.convolution = nn.Conv1d(24, 32, 3, padding=1)
            self.classify = nn.Linear(32, len(LABELS))

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            features = torch.relu(self.convolution(self.embedding(ids).transpose(1, 2)))
            tokens = (ids != 0).unsqueeze(1)
            pooled = torch.where(tokens, features, torch.full_like(features, -1e4)).amax(2)
            out: torch.Tensor = self.classify(pooled)
            return out

    return ReviewSentiment()


def train(ids: np.ndarray, labels: np.ndarray, vocabulary: int):  # type: ignore[no-untyped-def]
    from torch import nn

    from predictors.zoo.training import TrainingPlan, fit, make_deterministic, supervised_loss

    make_deterministic(SEED)
    model = _module(vocabulary)
    plan = TrainingPlan(epochs=12, batch_size=32, learning_rate=0.01, seed=SEED)
    loss = supervised_loss(model, ids, labels, nn.functional.cross_entropy)
    return model, fit(model, len(ids), loss, plan, MODEL, log_every=4)


def build_model(store: str) -> dict:
    """Learn the tokenizer, train the network, export it as ONNX and TorchScript, check that
    both agree and that it beats always answering the commoner class, and store them with the
    tokenizer file."""
    import torch

    from predictors.zoo.common import store_model
    from predictors.zoo.export import stage_exports

    splits = make_splits()
    tokenizer = make_tokenizer(splits["train"][0])
    vocabulary = tokenizer.get_vocab_size()
    ids = encode(tokenizer, splits["train"][0])
    model, training = train(ids, splits["train"][1], vocabulary)
    x = encode(tokenizer, splits["validation"][0])
    y = splits["validation"][1]

    def stage(staging: Any) -> dict:
        staging.write("tokenizer.json", tokenizer.to_str().encode())
        onnx, delta = stage_exports(
            staging, MODEL, model, torch.from_numpy(x[:1]), LABELS, x, spatial=False
        )
        top1 = float((onnx.argmax(1) == y).mean())
        baseline = max(float(y.mean()), 1 - float(y.mean()))
        if not top1 > baseline + 0.2:
            raise RuntimeError(
                f"{MODEL}: validation top-1 {top1:.3f}, not 0.2 above the commoner class's "
                f"{baseline:.3f}"
            )
        return {"validation_top1": top1, "max_abs_logit_diff": delta, "vocabulary": vocabulary}

    return store_model(store, MODEL, DATASET, model, training, stage)
