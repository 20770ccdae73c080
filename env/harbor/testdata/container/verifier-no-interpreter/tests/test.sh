#!/usr/bin/python9
print(1)
