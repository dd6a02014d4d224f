"""The kind tier: the product as real pods (docs/tools.md, "The kind cluster")."""

import pytest

#: Every test module here sets `pytestmark = KIND_TIER`: marked `e2e` and `slow`, and in
#: the xdist group "kind", so that `make test` (--dist loadgroup) runs them all on one
#: worker, against one cluster and one installed chart, while the other worker runs the
#: rest. (Added by a conftest hook instead, the group came too late for xdist's nodeids.)
KIND_TIER = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.xdist_group("kind")]
