package accounting

import (
	"fmt"
	"math"
	"unicode"
)

// Config is the `accounting:` section of the gpuscope config file: what
// a kWh costs and emits, for the run report's cost and CO₂ columns,
// which are left out while these are zero.
type Config struct {
	PricePerKWh    float64 `yaml:"price_per_kwh"`
	Currency       string  `yaml:"currency"`
	GramsCO2PerKWh float64 `yaml:"grams_co2_per_kwh"`
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
	return Prices{PerKWh: c.PricePerKWh, Currency: c.Currency, GramsCO2PerKWh: c.GramsCO2PerKWh}
}
