"""The eavesdropper's record: read-only views of the replies' bytes, equal to what Flower decodes."""

import numpy as np
from flwr.app import Array

from fl_privtext.federation.eavesdropper import numpy_view


def test_numpy_view_equals_array_numpy_without_a_copy():
    g = np.random.default_rng(0)
    for x in (g.normal(size=(7, 5)).astype(np.float32), g.integers(-9, 9, 11), np.arange(24, dtype=np.int8).reshape(2, 3, 4),
              np.float64(2.5), g.normal(size=(3, 4)) > 0):
        a = Array(np.asarray(x))
        v = numpy_view(a)
        np.testing.assert_array_equal(v, a.numpy())
        assert v.dtype == a.numpy().dtype and v.shape == a.numpy().shape
        assert not v.flags.writeable and not v.flags.owndata  # a view of the message's immutable bytes
    for x in (np.zeros((0, 50), np.float32), np.asfortranarray(g.normal(size=(4, 3)))):  # decoded instead
        a = Array(x)
        v = numpy_view(a)
        np.testing.assert_array_equal(v, x)
        assert v.shape == x.shape
