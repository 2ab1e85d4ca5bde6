package gpu

// pcieLaneBytesPerSecond is the usable rate of one PCIe lane in one
// direction, after line encoding (8b/10b up to gen 2, 128b/130b for gen 3
// to 5, FLIT/PAM4 for gen 6), as usually quoted: 250 MB/s, 500, 985, 1969,
// 3938, 7563. Protocol overhead (TLP headers) is not subtracted, which is
// why the ceiling is called theoretical.
var pcieLaneBytesPerSecond = [...]float64{
	1: 250e6,
	2: 500e6,
	3: 985e6,
	4: 1969e6,
	5: 3938e6,
	6: 7563e6,
}

// PCIeMaxBandwidth is the theoretical bandwidth per direction, in bytes
// per second, of a PCIe link of generation gen and width lanes: the value
// of FieldPCIeMaxBandwidth. It is 0 when the generation is unknown.
func PCIeMaxBandwidth(gen, width int) float64 {
	if gen < 1 || gen >= len(pcieLaneBytesPerSecond) || width < 1 {
		return 0
	}
	return pcieLaneBytesPerSecond[gen] * float64(width)
}
