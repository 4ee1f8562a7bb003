# Shared by run_device_arrival/order/cap/lazy/recheck.sh (runs 15–19 of
# bench/results/cxl_gpu.md): sourced, not run.
# cxl_device_setup RUN APP.cu…: the run's folder $w under $OUT and its log, the carry's
# bpftime-super-cxl as $cxl, the apps built with nvcc into $b ($APPS, else /tmp/cxlbin;
# apps already there are kept), the device's name in $w/device.txt.
# r LINE…: one `R …` measurement line into the log. val KEY: KEY's value on the last line
# of stdin that has it.
cxl_device_setup() {
	out=${OUT:?}; w=$out/$1; mkdir -p "$w"; log=$w/log.txt
	# `cxl run` reads a calibration (`cxl calibrate`) from here: each run its own.
	export XDG_CONFIG_HOME=$w/config
	carry=${CARRY:-target/gpu-carry}; cxl=$carry/bpftime-super-cxl
	b=${APPS:-/tmp/cxlbin}; mkdir -p "$b"
	local gen="-gencode arch=compute_90,code=[sm_90,compute_90]" s
	shift
	for s in "$@"; do
		[ -x "$b/$(basename "${s%.cu}")" ] || nvcc -O3 $gen -o "$b/$(basename "${s%.cu}")" "$s" 2>> "$w/nvcc.err" &
	done
	wait
	nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$w/device.txt"
}
r() { echo "R $*" | tee -a "$log"; }
val() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" | tail -1; }
