"""The client's side, one package (issue #22): what a client holds, what it releases and what it refuses.

- `upload`: its users' rows privatized in batches (`ClientData`, `client_upload`, the reproducible stream);
- `policy`: the client's own policy (`ClientPolicy`), delivered outside the ServerApp's messages;
- `ledger`: its per-user privacy ledger (`Ledger`), persisted in the node's state directory;
- `ondevice`: its on-device answer (randomized response on each test record's correctness);
- `guard`: every release checked against the policy and charged in the ledger before it leaves.

Framework-free and light (numpy and the privacy package; no flwr, no torch at import); nothing here imports the
server's modules or `fl_privtext.pipeline`. The Flower ClientApp (`fl_privtext.federation.client_app`) is a thin
adapter over it.
"""

from fl_privtext.client.guard import (
    phase_a_allowed,
    release_on_device,
    release_phase_a,
    release_upload,
    upload_epsilon,
)
from fl_privtext.client.ledger import Ledger
from fl_privtext.client.policy import (
    POLICY_ENV,
    REASONS,
    STATE_ENV,
    ClientPolicy,
    Refused,
    policy_from,
    state_dir_from,
)
from fl_privtext.client.upload import (
    CLIENT_SEED_ENV,
    NOT_POINT,
    UPLOAD_KEYS,
    ClientData,
    Upload,
    client_generator,
    client_on_device,
    client_seed_from,
    client_upload,
    data_digest,
    mechanism_for,
    merge_positions,
    merge_uploads,
    point_key,
    published,
    same_uploads,
    seed_fingerprint,
    upload_rows,
)

__all__ = [
    "CLIENT_SEED_ENV",
    "NOT_POINT",
    "POLICY_ENV",
    "REASONS",
    "STATE_ENV",
    "UPLOAD_KEYS",
    "ClientData",
    "ClientPolicy",
    "Ledger",
    "Refused",
    "Upload",
    "client_generator",
    "client_on_device",
    "client_seed_from",
    "client_upload",
    "data_digest",
    "mechanism_for",
    "merge_positions",
    "merge_uploads",
    "phase_a_allowed",
    "point_key",
    "policy_from",
    "published",
    "release_on_device",
    "release_phase_a",
    "release_upload",
    "same_uploads",
    "seed_fingerprint",
    "state_dir_from",
    "upload_epsilon",
    "upload_rows",
]
