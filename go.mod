module flowstate

go 1.26.8
