#!/bin/bash
set -e
cd /app
setsid python3 -m http.server "$SERVE_PORT" >/dev/null 2>&1 < /dev/null &
echo "$GREETING $(cat "$DATA_FILE")" > /home/agent/out.txt
for i in $(seq 50); do python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$SERVE_PORT/data.txt')" 2>/dev/null && break; sleep 0.1; done
