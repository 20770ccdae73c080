module wordfreq

go 1.22
