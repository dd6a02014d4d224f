"""The kind tier: the product as real pods (docs/tools.md, "The kind cluster")."""

import pytest

#: Every test module here sets `pytestmark = KIND_TIER`: marked `e2e` and `slow`. `make
#: test` runs this tier in a pytest process of its own after the other tiers (hack/test.sh),
#: against one cluster and one installed chart. The xdist group "kind" keeps the tier on one
#: worker when someone runs everything at once with `-n N --dist loadgroup`. (Added by a
#: conftest hook instead, the group came too late for xdist's nodeids.)
KIND_TIER = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.xdist_group("kind")]
