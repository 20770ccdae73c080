#!/bin/bash
# Attack: replace the tool the host's interpreter check runs (test -x
# /bin/bash) with one that never returns, so that the check, and the
# episode with it, would hang (was: eval never returned without
# --episode-timeout; infra_error with it).
printf '#!/bin/sh\nexec sleep 100000\n' > /tmp/blocker
chmod +x /tmp/blocker
cp /tmp/blocker /usr/bin/test
