package sandbox

import (
	"encoding/json"
	"testing"
)

// hostsLines: for each network the target shares with another container,
// that container's address there under its service name, container name
// and aliases; nothing for networks the target is not on, nor for itself.
func TestHostsLines(t *testing.T) {
	var cs []composeContainer
	err := json.Unmarshal([]byte(`[
	 {"Id": "m", "Name": "p_main_1", "Config": {"Labels": {"com.docker.compose.service": "main"}},
	  "NetworkSettings": {"Networks": {"p_default": {"IPAddress": "10.89.1.2", "Aliases": ["main", "abc123"]}}}},
	 {"Id": "d", "Name": "/p_db_1", "Config": {"Labels": {"com.docker.compose.service": "db"}},
	  "NetworkSettings": {"Networks": {
	    "p_default": {"IPAddress": "10.89.1.3", "GlobalIPv6Address": "fd00::3", "Aliases": ["db", "database", "bad name"]},
	    "p_back": {"IPAddress": "10.89.2.3", "Aliases": ["db"]}}}},
	 {"Id": "c", "Name": "p_cache_1", "Config": {"Labels": {"com.docker.compose.service": "cache"}},
	  "NetworkSettings": {"Networks": {"p_back": {"IPAddress": "10.89.2.4"}}}}
	]`), &cs)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{
		"10.89.1.3\tdb p_db_1 database\nfd00::3\tdb p_db_1 database\n",
		"10.89.1.2\tmain p_main_1 abc123\n10.89.2.4\tcache p_cache_1\n",
		"10.89.2.3\tdb p_db_1\n",
	} {
		if got := hostsLines(cs, i); got != want {
			t.Errorf("%s: got\n%q\nwant\n%q", cs[i].ID, got, want)
		}
	}
}
