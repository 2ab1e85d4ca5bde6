package accounting

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"unicode"
)

// Config is the `accounting:` section of the gpuscope config file: what
// a kWh and an hour of a GPU cost and what a kWh emits, for the run
// report's cost and CO₂ columns, which are left out while these are zero.
type Config struct {
	PricePerKWh float64 `yaml:"price_per_kwh"`
	// PricePerGPUHour is the price of an hour of a GPU by model, as the
	// GPU series' modelName spells it ("NVIDIA H100 80GB HBM3"), and
	// under "default" for the models not named.
	PricePerGPUHour map[string]float64 `yaml:"price_per_gpu_hour"`
	Currency        string             `yaml:"currency"`
	GramsCO2PerKWh  float64            `yaml:"grams_co2_per_kwh"`
}

// Validate refuses negative or non-finite figures and a currency that
// cannot sit in a table cell.
func (c Config) Validate() error {
	for _, f := range []struct {
		key     string
		v       float64
		example string
	}{
		{"accounting.price_per_kwh", c.PricePerKWh, "0.30"},
		{"accounting.grams_co2_per_kwh", c.GramsCO2PerKWh, "380"},
	} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return fmt.Errorf("%s: %g is not a price or amount per kWh (0 or more, e.g. %s)", f.key, f.v, f.example)
		}
	}
	for _, m := range slices.Sorted(maps.Keys(c.PricePerGPUHour)) {
		if v := c.PricePerGPUHour[m]; v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("accounting.price_per_gpu_hour: %q: %g is not a price per GPU-hour (0 or more, e.g. 2.50)", m, v)
		}
	}
	if len(c.Currency) > 16 {
		return fmt.Errorf("accounting.currency: %q is longer than 16 bytes (a code or symbol, e.g. EUR)", c.Currency)
	}
	for _, r := range c.Currency {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("accounting.currency: %q has a control character (a code or symbol, e.g. EUR)", c.Currency)
		}
	}
	return nil
}

// Prices is what the report charges.
func (c Config) Prices() Prices {
	return Prices{PerKWh: c.PricePerKWh, Currency: c.Currency, GramsCO2PerKWh: c.GramsCO2PerKWh, PerGPUHour: maps.Clone(c.PricePerGPUHour)}
}
