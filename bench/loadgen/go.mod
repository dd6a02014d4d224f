module weaseldb/bench/loadgen

go 1.22
