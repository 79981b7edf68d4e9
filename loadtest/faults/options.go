package faults

import "time"

// AsyncOptions configure -async: the asynchronous sale.
type AsyncOptions struct {
	Stock      int
	Rate       int
	Duration   time.Duration
	KillAfter  time.Duration
	Baseline   bool
	PauseAfter time.Duration
	PauseFor   time.Duration
	Seed       uint64
}

// DrillOptions configure -fault (the drills) and -recheck.
type DrillOptions struct {
	Fault         string
	Runs          int
	Seed          uint64
	Rate          float64 // -drill-rate
	LockTTL       time.Duration
	ClientTimeout time.Duration
	CheckTimeout  time.Duration
	ReadSlack     time.Duration
	LooseSoldOut  bool
	Direct        bool // clients talk to the replicas in turn, no balancer (tests)
	// NoRules gives the drills' third product no sale window and no limit (-rules=false),
	// for comparison; its orders are the same.
	NoRules bool
	Recheck string
}
