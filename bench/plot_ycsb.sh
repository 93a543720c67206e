#!/bin/sh
# plot_ycsb.sh RATIOS.csv OUT.png - bar chart of FlexDB / peer throughput
# ratios written by ycsb_bench (columns: phase,threads,vs_rocksdb,
# vs_leveldb,vs_lmdb), one cluster per phase and thread count, with the
# parity line at 1.  Needs gnuplot (Debian: gnuplot-nox).
set -eu
in=${1:?usage: plot_ycsb.sh RATIOS.csv OUT.png}
out=${2:?usage: plot_ycsb.sh RATIOS.csv OUT.png}
command -v gnuplot >/dev/null 2>&1 || { echo "plot_ycsb.sh: gnuplot not installed" >&2; exit 1; }
gnuplot <<GP
set terminal pngcairo size 1200,500 noenhanced
set output '$out'
set datafile separator ','
set title 'FlexDB throughput / peer throughput (median; > 1: FlexDB faster)'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set grid ytics
set yrange [0:*]
set ylabel 'ratio'
set xtics rotate by -45 scale 0
set key top left
set arrow from graph 0, first 1 to graph 1, first 1 nohead dt 2 lw 2 front
plot '$in' skip 1 using 3:xtic(sprintf('%s t%s', stringcolumn(1), stringcolumn(2))) title 'vs RocksDB', \
     '' skip 1 using 4 title 'vs LevelDB', \
     '' skip 1 using 5 title 'vs LMDB'
GP
