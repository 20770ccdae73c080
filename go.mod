module github.com/compactrl/compactrl

go 1.26.0

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/dlclark/regexp2 v1.12.0
	golang.org/x/sys v0.50.0
	golang.org/x/text v0.44.0
	gonum.org/v1/gonum v0.17.0
)

require github.com/ardanlabs/jinja v1.8.0

require go.yaml.in/yaml/v3 v3.0.6

require golang.org/x/term v0.48.0
