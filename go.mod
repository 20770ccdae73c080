module github.com/compactrl/compactrl

go 1.26
