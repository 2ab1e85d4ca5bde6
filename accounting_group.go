package main

import (
	"time"

	"github.com/prometheus/prometheus/rules"
)

// accountingGroupName is the built-in rule group whose series the run
// report integrates.
const accountingGroupName = "gpuscope.accounting"

// accountingGroup is the built-in accounting group as the rule manager
// runs it now; absent when rules.builtin disables it.
func (a *appliance) accountingGroup() (*rules.Group, bool) {
	return a.runningGroup(accountingGroupName)
}

// runningGroup is the rule group named name as the rule manager runs it
// now, after reloads and rules.builtin's filters.
func (a *appliance) runningGroup(name string) (*rules.Group, bool) {
	for _, g := range a.rules.Prometheus().RuleGroups() {
		if g.Name() == name {
			return g, true
		}
	}
	return nil, false
}

// accountingInterval is how much time each recorded accounting sample
// stands for: the group's interval after rules.builtin.time_scale, read
// from the running group so that it follows reloads.
func (a *appliance) accountingInterval() time.Duration {
	if g, ok := a.accountingGroup(); ok {
		return g.Interval()
	}
	return time.Duration(float64(time.Minute) / a.config.Load().Rules.Builtin.TimeScale)
}

// accountingRollupGroupName is the built-in group that sums the
// accounting series by the hour for reports over long ranges.
const accountingRollupGroupName = "gpuscope.accounting.hourly"

// accountingRollupInterval is the hourly group's interval as it runs now,
// 0 when rules.builtin disables it (the report then reads every minute).
func (a *appliance) accountingRollupInterval() time.Duration {
	if g, ok := a.runningGroup(accountingRollupGroupName); ok {
		return g.Interval()
	}
	return 0
}
