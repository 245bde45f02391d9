# Fills /output: 8 MiB in a private (0700) folder, then files in a 0555 one; exits 0.
[ "$SZBENCH_HOSTILE_TEST_IMAGE" = 1 ] || exit 3
mkdir -m 0700 /output/.private
dd if=/dev/zero of=/output/.private/blob bs=1048576 count=8 2>&1 || echo "hiding stopped"
mkdir /output/many
i=0
while [ $i -lt 300 ]; do
    touch /output/many/$i 2>/dev/null || { echo "files stopped after $i"; break; }
    i=$((i + 1))
done
chmod 0555 /output/many
exit 0
