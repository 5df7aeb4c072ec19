module github.com/weir-limits/weir/clients/go

go 1.19
